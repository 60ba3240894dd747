/* attrib_api.h — GET /api/v1/runs/{id}/attribution: an attribution method past raw
 * attention (attr_compute, include/attnscope/analysis.h; docs/attribution.md) on a cached
 * run's input, as a binary tensor; GET /api/v1/runs/{id}/intervene: the output with heads
 * ablated or attention edges knocked out, beside the original, as JSON. Internal to the server module; see docs/server.md.
 */
#ifndef AS_SRV_ATTRIB_API_H
#define AS_SRV_ATTRIB_API_H

#include "api.h"

/* attribution?method=rollout|flow|norm|grad|importance[&target=C][&position=P][&dtype=f32|f16|u8]
 * on entry e (borrowed, referenced by the caller). Fills rs: 200 with the tensor, 400 for
 * a bad query or input the method refuses, 503 when the server is full, 500 otherwise. */
void attrib_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

/* intervene?heads=L:H,...&knockout=L[:H]:Q>K,...[&mode=zero|mean][&renorm=0|1][&position=P]
 * [&top=K][&target=ID] on entry e: the output with and without the intervention (iv_compare,
 * iv_result_json; docs/attribution.md "Interventions") as JSON with "run". 400 for a bad
 * query or an intervention the model refuses, 503 when full, 500 otherwise. */
void intervene_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

#endif
