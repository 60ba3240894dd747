/* maxpool.c — adaptive max pooling of attention matrices (see maxpool.h). */
#include "maxpool.h"

#include <math.h>

int srv_maxpool_size(int T, int n) { return T < n ? T : n; }

int srv_maxpool_start(int i, int T, int P) { return (int)(((long long)i * T) / P); }

void srv_maxpool(const float *att, int T, int P, float *out, float *scratch) {
    srv_maxpool_rect(att, T, T, P, P, out, scratch);
}

void srv_maxpool_rect(const float *att, int R, int C, int Pr, int Pc, float *out, float *scratch) {
    for (int bi = 0; bi < Pr; bi++) {
        /* the row block's column-wise max (contiguous: vectorizes), then each column block's max;
         * `v > m ? v : m` skips NaN since every comparison with NaN is false */
        for (int j = 0; j < C; j++) scratch[j] = -INFINITY;
        for (int i = srv_maxpool_start(bi, R, Pr); i < srv_maxpool_start(bi + 1, R, Pr); i++) {
            const float *row = att + (size_t)i * (size_t)C;
            for (int j = 0; j < C; j++) scratch[j] = row[j] > scratch[j] ? row[j] : scratch[j];
        }
        for (int bj = 0; bj < Pc; bj++) {
            float m = -INFINITY;
            for (int j = srv_maxpool_start(bj, C, Pc); j < srv_maxpool_start(bj + 1, C, Pc); j++)
                m = scratch[j] > m ? scratch[j] : m;
            out[(size_t)bi * (size_t)Pc + (size_t)bj] = m;
        }
    }
}
