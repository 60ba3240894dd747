/* gen_api.h — the generate route of the server (POST /api/v1/generate): a causal LM's
 * continuation of a prompt (attnscope/generate.h) with every generated token's attention
 * rows over the prompt and the tokens before it, for every layer and head, as one binary
 * tensor. Internal to the server module; see docs/server.md, "Generation".
 * What it does not: cache generations, stream steps while they run, or generate with
 * encoder-decoder models.
 */
#ifndef AS_SRV_GEN_API_H
#define AS_SRV_GEN_API_H

#include "api.h"

#define SRV_GEN_MAX_NEW 128                  /* "max_new": tokens one request may generate */
#define SRV_GEN_MAX_ROW_BYTES (64u << 20)    /* the rows of one reply at f32 (steps x L x H x T x 4) */

/* POST /api/v1/generate with the JSON body {model, text | ids, max_new?, temperature?,
 * top_k?, seed?, stop_at_eos?, dtype?}; fills rs (a 4xx one-line error on a bad body). */
void gen_api_route(srv_state *s, const srv_request *rq, srv_response *rs);

#endif
