/* Row kernels for sparse tables on a CPU (float32, int64 ids, one thread): word2vec's scores and
 * their gradients, and a lazy Adam step over a set of rows. Compiled at first use by
 * seqkit/core/rowkernels.py (cc -O3 -march=native); each function does what the torch path of
 * seqkit/models/word2vec.py and seqkit/optim/optimizers.py:RowAdam does (tests/test_rowkernels.py
 * compares them). The reads of a table are first grouped by row with a counting sort, so each pass
 * visits a table's rows once each, in memory order, and a row's gradient is summed in place (in L1) and
 * written once: no sort, no (N, D) temporary, no (V, D) scratch.
 *
 * Shapes: P predictions, K scored words each, D the row size, V the table's rows, N reads. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* A counting sort of the reads T (N = P x K: prediction p = n / K reads row T[n]) of a table of V
 * rows: ORDER (N,) the read positions grouped by row, rows increasing, positions increasing within
 * a row; STARTS (V + 1,) where each row's reads begin in ORDER; HIDDEN (N,) the hidden row that
 * scores each ordered read, HROW[p] (HROW NULL: p). Reads of row SKIP (-1: none; CBOW's <pad>) are
 * left out. The passes below then visit each table row once, in memory order, and read HIDDEN in
 * order. Returns -1, or the first position whose row is outside [0, V) (nothing written then but
 * STARTS). */
int64_t rk_order_by_row(const int64_t *restrict T, const int64_t *restrict HROW, int64_t N, int64_t K, int64_t V,
                        int64_t SKIP, int64_t *restrict ORDER, int64_t *restrict HIDDEN, int64_t *restrict STARTS) {
    memset(STARTS, 0, (size_t)(V + 1) * sizeof(int64_t));
    for (int64_t n = 0; n < N; n++) {
        if (T[n] < 0 || T[n] >= V) return n;
        if (T[n] != SKIP) STARTS[T[n] + 1]++;
    }
    for (int64_t v = 0; v < V; v++) STARTS[v + 1] += STARTS[v];
    for (int64_t n = 0; n < N; n++) {
        if (T[n] == SKIP) continue;
        const int64_t i = STARTS[T[n]]++;  /* STARTS[v] ends where row v + 1 starts */
        ORDER[i] = n;
        HIDDEN[i] = HROW ? HROW[n / K] : n / K;
    }
    for (int64_t v = V; v > 0; v--) STARTS[v] = STARTS[v - 1];
    STARTS[0] = 0;
    return -1;
}

/* The scores S[n] = W[v] . H[HIDDEN[i]] of each read n = ORDER[i] of row v (as above). Visiting W row
 * by row, each row is read once, in memory order; H holds a batch's rows, so it stays in cache. */
void rk_scores_by_row(const float *restrict H, const float *restrict W, const int64_t *restrict ORDER,
                      const int64_t *restrict HIDDEN, const int64_t *restrict STARTS, float *restrict S, int64_t V,
                      int64_t D) {
    for (int64_t v = 0; v < V; v++) {
        const float *w = W + v * D;
        for (int64_t i = STARTS[v]; i < STARTS[v + 1]; i++) {
            const float *h = H + HIDDEN[i] * D;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t d = 0; d < D; d++) s += w[d] * h[d];
            S[ORDER[i]] = s;
        }
    }
}

/* The backward pass of rk_scores_by_row for the scores' gradient G (N,): GH[HIDDEN[i]] += G[n] W[v]
 * (GH, H's R rows, zeroed first), and each row v with reads gets its sum of G[n] H[HIDDEN[i]] written
 * to OUT[u], its id to OUT_IDS[u], u counting the rows with reads in increasing order. Returns U. */
int64_t rk_scores_backward_by_row(const float *restrict G, const float *restrict H, const float *restrict W,
                                  const int64_t *restrict ORDER, const int64_t *restrict HIDDEN,
                                  const int64_t *restrict STARTS, float *restrict GH, int64_t *restrict OUT_IDS,
                                  float *restrict OUT, int64_t R, int64_t V, int64_t D) {
    memset(GH, 0, (size_t)(R * D) * sizeof(float));
    int64_t u = 0;
    for (int64_t v = 0; v < V; v++) {
        if (STARTS[v] == STARTS[v + 1]) continue;
        const float *w = W + v * D;
        float *out = OUT + u * D;
        for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
        for (int64_t i = STARTS[v]; i < STARTS[v + 1]; i++) {
            const float g = G[ORDER[i]];
            const float *h = H + HIDDEN[i] * D;
            float *gh = GH + HIDDEN[i] * D;
            for (int64_t d = 0; d < D; d++) {
                out[d] += g * h[d];
                gh[d] += g * w[d];
            }
        }
        OUT_IDS[u++] = v;
    }
    return u;
}

/* CBOW's hidden vectors: OUT[p] = the mean of W's rows CONTEXT[p, :] that are not PAD (zeros where
 * all are), for CONTEXT (P, C). */
void rk_mean_rows(const int64_t *restrict CONTEXT, const float *restrict W, float *restrict OUT, int64_t P,
                  int64_t C, int64_t PAD, int64_t D) {
    for (int64_t p = 0; p < P; p++) {
        float *out = OUT + p * D;
        for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
        int64_t count = 0;
        for (int64_t c = 0; c < C; c++) {
            const int64_t row = CONTEXT[p * C + c];
            if (row == PAD) continue;
            const float *w = W + row * D;
            for (int64_t d = 0; d < D; d++) out[d] += w[d];
            count++;
        }
        if (count > 1)
            for (int64_t d = 0; d < D; d++) out[d] /= (float)count;
    }
}

/* The distinct values of T (N,), all in [0, V), into WORDS (increasing; U of them) and each read's
 * index among them into INVERSE (N,); SLOT (V,) scratch. Returns U. */
int64_t rk_unique(const int64_t *restrict T, int64_t N, int64_t V, int64_t *restrict WORDS,
                  int64_t *restrict INVERSE, int64_t *restrict SLOT) {
    memset(SLOT, 0, (size_t)V * sizeof(int64_t));
    for (int64_t n = 0; n < N; n++) SLOT[T[n]] = 1;
    int64_t u = 0;
    for (int64_t v = 0; v < V; v++)
        if (SLOT[v]) {
            SLOT[v] = u;
            WORDS[u++] = v;
        }
    for (int64_t n = 0; n < N; n++) INVERSE[n] = SLOT[T[n]];
    return u;
}

/* A table's gradient from reads grouped by row (rk_order_by_row with K = 1): each ordered read adds
 * SRC[HIDDEN[i]] to its row; each row with reads gets its sum written to OUT[u], its id to OUT_IDS[u].
 * Returns U. */
int64_t rk_accumulate_by_row(const int64_t *restrict HIDDEN, const int64_t *restrict STARTS,
                             const float *restrict SRC, int64_t *restrict OUT_IDS, float *restrict OUT, int64_t V,
                             int64_t D) {
    int64_t u = 0;
    for (int64_t v = 0; v < V; v++) {
        if (STARTS[v] == STARTS[v + 1]) continue;
        float *out = OUT + u * D;
        for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
        for (int64_t i = STARTS[v]; i < STARTS[v + 1]; i++) {
            const float *src = SRC + HIDDEN[i] * D;
            for (int64_t d = 0; d < D; d++) out[d] += src[d];
        }
        OUT_IDS[u++] = v;
    }
    return u;
}

/* Lazy Adam on rows ROWS (U,) of the table PARAM (V, D) with their gradient G (U, D) and moments M,
 * V2 (V, D): torch.optim.SparseAdam's arithmetic (eps added to the uncorrected root; SIZE = lr *
 * sqrt(1 - beta2^t) / (1 - beta1^t)), as RowAdam writes it with torch ops. */
void rk_row_adam(float *restrict PARAM, float *restrict M, float *restrict V2, const int64_t *restrict ROWS,
                 const float *restrict G, int64_t U, int64_t D,
                 float beta1, float beta2, float eps, float size) {
    const float w1 = 1.0f - beta1, w2 = 1.0f - beta2;
    for (int64_t u = 0; u < U; u++) {
        const int64_t r = ROWS[u];
        const float *g = G + u * D;
        float *p = PARAM + r * D, *m = M + r * D, *v = V2 + r * D;
        for (int64_t d = 0; d < D; d++) {
            const float mm = m[d] + w1 * (g[d] - m[d]);
            const float vv = v[d] * beta2 + w2 * g[d] * g[d];
            m[d] = mm;
            v[d] = vv;
            p[d] += (mm / (sqrtf(vv) + eps)) * (-size);
        }
    }
}

#ifndef AHEAD_P
#define AHEAD_P 2 /* predictions ahead whose rows are prefetched */
#endif

static inline void prefetch_row(const float *row, int64_t D) {
    for (int64_t d = 0; d < D; d += 16) __builtin_prefetch(row + d, 1, 3);
    __builtin_prefetch(row + D - 1, 1, 3); /* a row that starts inside a cache line ends in one more */
}

/* Word2vec's own update (the C code's and gensim's): predictions one after another, each one's
 * gradient applied at once (per-pair SGD). Prediction p: H = the mean of its context rows of IN
 * (CTX (P, C), SKIP-valued ids left out; skip-gram C = 1), then for each scored word k of T (P, K),
 * column 0 the true word: S[p, k] = OUT[t] . H (written out, before the update, for the loss);
 * g = LR (label - sigmoid(s)); E += g OUT[t]; OUT[t] += g H, at once (a row scored twice in one
 * prediction is read updated the second time, as in the C code). A noise word equal to the true
 * word is scored but not trained (the loss leaves it out). Then each context row gets E whole (as the C
 * code's CBOW, and the gradient rk_rows_grad gives). SCRATCH: 2 D floats. Returns -1, or the first
 * prediction holding an id outside [0, V) (the predictions before it are applied). */
int64_t rk_pair_sgd(const int64_t *restrict CTX, const int64_t *restrict T, float *restrict IN, float *restrict OUT,
                     float *restrict S, float *restrict SCRATCH, int64_t P, int64_t C, int64_t K, int64_t V, int64_t D,
                     int64_t SKIP, float LR) {
    float *restrict h = SCRATCH, *restrict e = SCRATCH + D;
    for (int64_t p = 0; p < P; p++) {
        const int64_t *ctx = CTX + p * C, *t = T + p * K;
        for (int64_t c = 0; c < C; c++)
            if (ctx[c] != SKIP && (ctx[c] < 0 || ctx[c] >= V)) return p;
        for (int64_t k = 0; k < K; k++)
            if (t[k] < 0 || t[k] >= V) return p;
        if (p + AHEAD_P < P) { /* the rows of a prediction ahead, fetched while this one computes */
            const int64_t *nc = ctx + AHEAD_P * C, *nt = t + AHEAD_P * K;
            for (int64_t c = 0; c < C; c++)
                if (nc[c] >= 0 && nc[c] < V && nc[c] != SKIP) prefetch_row(IN + nc[c] * D, D);
            for (int64_t k = 0; k < K; k++)
                if (nt[k] >= 0 && nt[k] < V) prefetch_row(OUT + nt[k] * D, D);
        }
        memset(h, 0, (size_t)D * sizeof(float));
        memset(e, 0, (size_t)D * sizeof(float));
        int64_t n = 0;
        for (int64_t c = 0; c < C; c++) {
            if (ctx[c] == SKIP) continue;
            const float *x = IN + ctx[c] * D;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) h[d] += x[d];
            n++;
        }
        if (n > 1) {
            const float inv = 1.0f / (float)n;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) h[d] *= inv;
        }
        for (int64_t k = 0; k < K; k++) {
            float *w = OUT + t[k] * D;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t d = 0; d < D; d++) s += w[d] * h[d];
            S[p * K + k] = s;
            if (k > 0 && t[k] == t[0]) continue;
            const float g = LR * ((k == 0 ? 1.0f : 0.0f) - 1.0f / (1.0f + expf(-s)));
#pragma omp simd
            for (int64_t d = 0; d < D; d++) {
                e[d] += g * w[d];
                w[d] += g * h[d];
            }
        }
        for (int64_t c = 0; c < C; c++) {
            if (ctx[c] == SKIP) continue;
            float *x = IN + ctx[c] * D;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) x[d] += e[d];
        }
    }
    return -1;
}
