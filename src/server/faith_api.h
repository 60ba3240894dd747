/* faith_api.h — GET /api/v1/runs/{id}/faithfulness: how faithful each per-token attribution
 * method is on a cached run's input (faith_compute, include/attnscope/faith.h;
 * docs/attribution.md "Faithfulness"), as JSON. Internal to the server module; see
 * docs/server.md.
 */
#ifndef AS_SRV_FAITH_API_H
#define AS_SRV_FAITH_API_H

#include "api.h"

/* Most removable tokens the route scores (2 n forwards per method). */
#define FAITH_API_MAX_TOKENS 256

/* faithfulness[?methods=grad,...,random][&removal=delete|mask][&steps=N][&seed=S] on entry e
 * (borrowed, referenced by the caller): faith_result_json with "run". Without methods every
 * method (flow only up to ATTR_FLOW_MAX_T tokens). 400 for a bad query, a model without a
 * classifier head, an input without removable tokens or with more than
 * FAITH_API_MAX_TOKENS; 503 when the server is full; 500 otherwise. */
void faith_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

#endif
