/* tile_api.h — the routes of long runs: GET /api/v1/runs/{id}/tile (a pooled block of
 * one head's attention, max and mean, from the dense capture or recomputed from q and
 * k; server/tile.h), GET /api/v1/runs/{id}/stats (the per-head statistics of the
 * forward, CAP_STATS) and GET /api/v1/runs/{id}/thumbs (every head's thumbnail pooled
 * by the forward, CAP_THUMBS, with the statistics), all as binary tensors. Internal to the server module; see
 * docs/server.md, "Long inputs".
 */
#ifndef AS_SRV_TILE_API_H
#define AS_SRV_TILE_API_H

#include "api.h"

/* tile?layer=L&head=H[&rows=a-b][&cols=c-d][&n=N][&exclude=k1,k2,...][&dtype=f32|f16|u8]
 * on entry e (borrowed, referenced by the caller), or layers=a-b&heads=c-d instead of
 * layer and head for the same tile of every head of that block. Fills rs: 200 with
 * tensors max and mean ((Pr, Pc), or (layers, heads, Pr, Pc)), 400 for a bad query, 413
 * over SRV_TILE_MAX_PER_REQUEST tiles or SRV_TILE_MAX_RESPONSE_BYTES, 429 (Retry-After)
 * while SRV_TILE_MAX_ACTIVE requests compute, 500 otherwise. */
void tile_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

/* stats[?dtype=f32|f16|u8] on entry e: tensor head_stats (L, H, AS_HEAD_N_STATS). 400
 * for a bad dtype, 500 when the run has no statistics. */
void tile_api_stats(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

/* thumbs[?layers=a-b][&heads=c-d][&op=max|mean|both][&dtype=f32|f16|u8] on entry e: the
 * model view's thumbnails the forward pooled (CAP_THUMBS; of a dense run, its attention
 * pooled here onto the same blocks), tensors max and / or mean (layers, heads, S, S),
 * S = min(T, AS_THUMB_SIDE), and head_stats (layers, heads, AS_HEAD_N_STATS), in one
 * reply. 400 for a bad query, 409 when the run has neither (encoder-decoder). */
void tile_api_thumbs(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs);

#endif
