/* assets.h — the web front end embedded into the binary at build time. The table
 * is generated (by src/server/embed_assets.cmake from web/dist) into the build
 * folder as srv_assets.c; the server looks paths up in it and never reads files.
 */
#ifndef AS_SRV_ASSETS_H
#define AS_SRV_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *path;          /* "/index.html", "/assets/index-abc123.js" */
    const char *mime;          /* "text/html; charset=utf-8", ... */
    const unsigned char *data; /* (len) */
    size_t len;
} srv_asset;

extern const srv_asset srv_assets[];
extern const size_t srv_n_assets;

#endif
