/* An epoch's order for token-budget batching (seqkit/data/orderkernels.py): numpy's seeded
 * permutation, drawn with the generator's own bit stream, and the stable sort of it by a
 * small key. Both are one pass of random memory accesses; here the address of each access is
 * known tens of steps ahead, so it is prefetched, and the pass waits on memory's throughput,
 * not on its latency. */
#include <stdint.h>

/* numpy's bitgen_t (numpy/random/bitgen.h), the struct behind Generator.bit_generator */
typedef struct {
  void *state;
  uint64_t (*next_uint64)(void *st);
  uint32_t (*next_uint32)(void *st);
  double (*next_double)(void *st);
  uint64_t (*next_raw)(void *st);
} bitgen_t;

/* numpy's random_interval: a value in [0, max] by masked rejection, 32-bit draws below 2^32 */
static inline int64_t interval(bitgen_t *g, uint64_t max) {
  uint64_t mask = max, v;
  if (max == 0) return 0;
  mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4;
  mask |= mask >> 8; mask |= mask >> 16; mask |= mask >> 32;
  if (max <= 0xffffffffULL) {
    while ((v = (g->next_uint32(g->state) & mask)) > max) ;
  } else {
    while ((v = (g->next_uint64(g->state) & mask)) > max) ;
  }
  return (int64_t)v;
}

#define AHEAD 32 /* swaps drawn (and their targets prefetched) before they are made */

/* Generator.permutation(n): out (n,) = arange(n), then for i = n-1 .. 1 swap out[i] with out[j],
 * j = interval(i): numpy's Fisher-Yates (Generator.shuffle), the same draws in the same order. */
void ok_permutation(int64_t *out, int64_t n, bitgen_t *g) {
  int64_t ring[AHEAD];
  for (int64_t i = 0; i < n; i++) out[i] = i;
  if (n < 2) return;
  int64_t drawn = 0, next = n - 1; /* ring holds the j of i, i-1, ..; next: the i to draw for */
  for (; next >= 1 && drawn < AHEAD; next--, drawn++) {
    ring[drawn] = interval(g, (uint64_t)next);
    __builtin_prefetch(out + ring[drawn], 1, 3);
  }
  int64_t k = 0;
  for (int64_t i = n - 1; i >= 1; i--) {
    int64_t j = ring[k];
    if (next >= 1) {
      ring[k] = interval(g, (uint64_t)next--);
      __builtin_prefetch(out + ring[k], 1, 3);
    }
    k = k + 1 == AHEAD ? 0 : k + 1;
    int64_t t = out[j]; out[j] = out[i]; out[i] = t;
  }
}

/* out (n,): perm (n,) stably sorted by key[perm[p]] (a counting sort), starts (K,) the first
 * position of each key value (the exclusive cumulative count), advanced as values are placed. */
#define SORT_BY_KEY(NAME, T)                                                            \
  void NAME(const int64_t *perm, int64_t n, const T *key, int64_t *starts, int64_t *out) { \
    for (int64_t p = 0; p < n; p++) {                                                   \
      if (p + AHEAD < n) __builtin_prefetch(key + perm[p + AHEAD], 0, 3);               \
      int64_t v = perm[p];                                                              \
      out[starts[key[v]]++] = v;                                                        \
    }                                                                                   \
  }
SORT_BY_KEY(ok_sort_by_key_u8, uint8_t)
SORT_BY_KEY(ok_sort_by_key_u16, uint16_t)
