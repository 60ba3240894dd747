/* maps_api.h — GET /api/v1/runs/{id}/maps: an attribution method's token-to-token maps of a
 * cached run in the layout of the attention route, (layers, heads, T, T), so the head and
 * model views draw any method where they draw raw attention (docs/server.md "Maps"); and
 * GET /api/v1/runs/{id}/lens: the logit lens of the run's input at one position. Internal
 * to the server module.
 */
#ifndef AS_SRV_MAPS_API_H
#define AS_SRV_MAPS_API_H

#include "api.h"

/* Most results kept per run (a norm result is as large as the run's attention). */
#define SRV_MAPS_PER_RUN 4
/* Most work of one maps?method=flow request: T^2 (l + 1) max-flow layer-graphs for each layer l
 * it asks for (layer l's flow is on a graph of l + 1 layers), here every layer of a 12-layer
 * model at ATTR_FLOW_MAX_T = 128 tokens, T^2 L (L + 1) / 2 (about 10 s of CPU on one thread for
 * BERT-base, docs/attribution.md; under the forward lock). A larger request is a 400 naming the
 * most tokens its layers may take. */
#define SRV_MAPS_FLOW_MAX_WORK (128L * 128L * 78L)
/* Most tokens per layer the lens route lists. */
#define SRV_LENS_MAX_TOP 50

/* maps?method=norm|norm2|alti|rollout|flow|grad[&layers=a-b][&heads=c-d][&pool=N]
 * [&dtype=f32|f16|u8][&target=C][&position=P] on entry e (borrowed, referenced by the
 * caller): one tensor "maps" (nl, nh, S, S), S = T or the pooled side, with meta {run,
 * method, per, layers, heads, tokens[, pool, pool_op][, target, position, logit], cached}. per =
 * head (norm: (L, H) maps, the ranges select) or layer (norm2, alti, rollout, flow, grad: one map
 * per layer, nh = 1, heads ignored; alti, rollout, flow and grad: layer l's map is the method
 * through layers 0..l, the last the whole model's). The method's result is computed once per
 * (method, target, position) and kept with the run (at most SRV_MAPS_PER_RUN, least recently
 * used dropped; cached says whether this request found it there; flow's layer maps are computed
 * as requests ask for them and kept, cached false when this request computed one). 400 for a bad query or input
 * the method refuses (flow over ATTR_FLOW_MAX_T tokens or SRV_MAPS_FLOW_MAX_WORK), 409 for an
 * encoder-decoder run, 503 when full. */
void maps_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

/* lens[?position=P][&top=K]: the logit lens (as_run_logit_lens) of entry e's input at
 * position P (default the last real token), each layer's top K (default 5, at most 50)
 * tokens as JSON {run, position, id, layers: [{layer, top: [{id, text, prob, logit}]}]}
 * (lens_json, the same as `attnscope lens --format json`). 400 for a bad query or a model
 * without an LM / masked-LM head, 409 for an encoder-decoder run, 503 when full. */
void lens_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

#endif
