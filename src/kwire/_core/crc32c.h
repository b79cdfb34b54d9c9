/* kwire's CRC32C (Castagnoli) for x86-64 CPUs with SSE4.2: the crc32
 * instruction on three interleaved streams (one instruction's latency hides
 * behind the other two), each block's three partial CRCs then joined by
 * shifting them past the blocks after them (four table lookups).
 *
 * Why not google-crc32c's, which does the same: on inputs of 16 KiB and
 * more its widest loop ran at a third of the speed of its next one on the
 * machines kwire is measured on (a fetched buffer's batches are mostly that
 * large), and the columnar decoder's CRC took four times the C floor's
 * (benchmarks/compare_floor.py). native.pyx uses this where the CPU has
 * SSE4.2 (checked at run time, compiled for it with a target attribute so
 * the rest of the module stays baseline x86-64) and checks it against
 * google-crc32c at import; elsewhere (ARM, or no SSE4.2) google-crc32c's.
 *
 * kw_crc32c_hw() gives the function (NULL: none for this CPU). It extends
 * a finished CRC as google-crc32c's crc32c_extend does: f(0, p, n) is the
 * CRC32C of p[0..n). */
#ifndef KWIRE_CRC32C_H
#define KWIRE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KW_CRC_POLY 0x82F63B78u   /* reflected Castagnoli polynomial */

typedef uint32_t (*kw_crc32c_fn)(uint32_t crc, const uint8_t* p, size_t n);

/* a * b modulo the polynomial, both reflected (x^0 is the top bit) */
static uint32_t kw_crc_multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    if (a == 0)
        return 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ KW_CRC_POLY : b >> 1;
    }
    return p;
}

/* x^(8n) modulo the polynomial: what moving a CRC past n zero bytes multiplies it by */
static uint32_t kw_crc_x8n(size_t n) {
    uint32_t p = 1u << 31, sq = 1u << 30;      /* x^0, x^1 */
    uint64_t e = (uint64_t)n * 8;
    while (e) {
        if (e & 1)
            p = kw_crc_multmodp(sq, p);
        sq = kw_crc_multmodp(sq, sq);
        e >>= 1;
    }
    return p;
}

typedef struct { uint32_t t[4][256]; } KwCrcShift;    /* a CRC moved past one block: a lookup per byte */

static void kw_crc_shift_init(KwCrcShift* s, size_t n) {
    uint32_t f = kw_crc_x8n(n);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            s->t[k][b] = kw_crc_multmodp(b << (8 * k), f);
}

static inline uint32_t kw_crc_shift(const KwCrcShift* s, uint32_t c) {
    return s->t[0][c & 0xff] ^ s->t[1][(c >> 8) & 0xff] ^ s->t[2][(c >> 16) & 0xff] ^ s->t[3][c >> 24];
}

/* three block sizes, largest first: each loop takes three blocks at once */
#define KW_CRC_BLOCK0 5440
#define KW_CRC_BLOCK1 1360
#define KW_CRC_BLOCK2 336

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

static KwCrcShift kw_crc_shift0, kw_crc_shift1, kw_crc_shift2;

#define KW_CRC8(c, p) __builtin_ia32_crc32di((c), kw_crc_load64(p))

static inline uint64_t kw_crc_load64(const uint8_t* p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Three blocks of BLK bytes (a multiple of 16) at once, 16 bytes of each a
 * step; the states are kept 64 bits wide (the instruction's own width, its
 * top half zero), so no step spends an instruction narrowing them. */
#define KW_CRC_STREAMS(BLK, SH)                                              \
    while (n >= 3 * (size_t)(BLK)) {                                         \
        uint64_t a = c, b = 0, d = 0;                                        \
        const uint8_t* q = p;                                                \
        const uint8_t* end = p + (BLK);                                      \
        do {                                                                 \
            a = KW_CRC8(a, q);                                               \
            b = KW_CRC8(b, q + (BLK));                                       \
            d = KW_CRC8(d, q + 2 * (BLK));                                   \
            a = KW_CRC8(a, q + 8);                                           \
            b = KW_CRC8(b, q + (BLK) + 8);                                   \
            d = KW_CRC8(d, q + 2 * (BLK) + 8);                               \
            q += 16;                                                         \
        } while (q < end);                                                   \
        c = kw_crc_shift(&(SH), kw_crc_shift(&(SH), (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d; \
        p += 3 * (BLK);                                                      \
        n -= 3 * (BLK);                                                      \
    }

__attribute__((target("sse4.2")))
static uint32_t kw_crc32c_sse42(uint32_t crc, const uint8_t* p, size_t n) {
    uint32_t c = ~crc;
    uint64_t w;
    KW_CRC_STREAMS(KW_CRC_BLOCK0, kw_crc_shift0)
    KW_CRC_STREAMS(KW_CRC_BLOCK1, kw_crc_shift1)
    KW_CRC_STREAMS(KW_CRC_BLOCK2, kw_crc_shift2)
    w = c;
    for (; n >= 8; n -= 8, p += 8)
        w = KW_CRC8(w, p);
    c = (uint32_t)w;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return ~c;
}

/* kw_crc32c_sse42 with its tables made, if this CPU has SSE4.2; else NULL */
static kw_crc32c_fn kw_crc32c_hw(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2"))
        return NULL;
    kw_crc_shift_init(&kw_crc_shift0, KW_CRC_BLOCK0);
    kw_crc_shift_init(&kw_crc_shift1, KW_CRC_BLOCK1);
    kw_crc_shift_init(&kw_crc_shift2, KW_CRC_BLOCK2);
    return kw_crc32c_sse42;
}

#else   /* not x86-64 with GCC or Clang: google-crc32c's (it has ARMv8's crc32c instructions) */

static kw_crc32c_fn kw_crc32c_hw(void) { return NULL; }

#endif
#endif
