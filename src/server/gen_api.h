/* gen_api.h — the generate route of the server (POST /api/v1/generate): a causal LM's
 * continuation of a prompt, or an encoder-decoder model's output for a source
 * (attnscope/generate.h), greedy, sampled or by beam search (attnscope/beam.h), with every
 * generated token's attention rows over the tokens before it (and over the source:
 * cross-attention), for every layer and head, as binary tensors. Internal to the server
 * module; see docs/server.md, "Generation".
 * What it does not: cache generations or stream steps while they run.
 */
#ifndef AS_SRV_GEN_API_H
#define AS_SRV_GEN_API_H

#include "api.h"

#define SRV_GEN_MAX_NEW 128                  /* "max_new": tokens one request may generate */
#define SRV_GEN_MAX_ROW_BYTES (64u << 20)    /* the rows of one reply at f32 (steps x L x H x keys x 4,
                                                every hypothesis' too with several) */

/* POST /api/v1/generate with the JSON body {model, text | ids, target_ids?, max_new?,
 * temperature?, top_k?, seed?, stop_at_eos?, dtype?, beams?, num_return?, length_penalty?,
 * early_stopping?}; fills rs (a 4xx one-line error on a bad body). */
void gen_api_route(srv_state *s, const srv_request *rq, srv_response *rs);

#endif
