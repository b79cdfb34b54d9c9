/* The machine's floor for kwire's ColumnarDecoder: the same work in plain C.
 *
 * Reads a file of uncompressed Kafka v2 record batches (as a Fetch response
 * carries them) and walks it as ColumnarDecoder must: every batch header
 * checked (size, magic, count, no codec), every record parsed with every
 * bounds check (length, attributes, timestamp and offset deltas, key, value,
 * header count, each header's key and value, the record ending where its
 * length said, the batch ending after its last record), CRC32C checked per
 * batch, and keys and values gathered into contiguous buffers with int32
 * end offsets and a key validity bitmap, as Arrow holds a binary column.
 * Nothing is allocated while timed: the output buffers are made once, as
 * large as the input, and reused by every call.
 *
 * Four modes: parse (walk and parse only), parse+crc, parse+gather, all
 * (parse, CRC and gather: what ColumnarDecoder does at least). Three cases,
 * as benchmarks/compare_floor.py runs kwire: single (the whole file in one
 * call, again and again), chunks (the file as calls of at most CHUNK bytes,
 * cut at batch boundaries as a fetch is), alternate (a call on the whole
 * file, then one chunk, and so on).
 *
 *   floor FILE CHUNK_BYTES SECONDS [wall|cpu]     one JSON object on stdout
 *
 * Each (mode, case) runs for at least SECONDS; records/s is over that
 * time: wall-clock time, or with "cpu" the thread's CPU time (steadier on
 * a machine that other work shares). CRC32C: the SSE4.2 crc32 instruction on three interleaved streams
 * (what google-crc32c, kwire's CRC32C, does on this kind of CPU), or the
 * ARMv8 crc32c instructions, or a table where neither is compiled in (the
 * "crc32c" field says which). Built by compare_floor.py with
 * gcc -O2 -march=native. Exits 1 with a message on stderr if the input is
 * not what it expects (it is checked, not trusted).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#define CRC_KIND "sse4.2 crc32 instructions, 3 interleaved streams"
#elif defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define CRC_KIND "armv8 crc32c instructions, 3 interleaved streams"
#else
#define CRC_KIND "table, 1 byte a step (no crc32c instructions compiled in)"
#endif

#define POLY 0x82f63b78u  /* CRC32C, reflected */
#define V2_HEADER 61
#define V2_CRC_START 21
#define LOG_OVERHEAD 12

/* ------------------------------------------------------------ CRC32C */
static uint32_t table[256];

/* Moving a CRC past n zero bytes: kwire's own helpers (crc32c.h: the
 * multiplication modulo the polynomial and the four byte tables), the same
 * on every CPU; the streams below use this CPU's crc32 instructions. */
#include "../../src/kwire/_core/crc32c.h"
typedef KwCrcShift Shift;
#define shift_init kw_crc_shift_init
#define shift kw_crc_shift

static uint32_t crc_bytes(uint32_t c, const uint8_t* p, size_t n) {
    while (n--)
        c = (c >> 8) ^ table[(c ^ *p++) & 0xff];
    return c;
}

#if defined(__SSE4_2__) || defined(__ARM_FEATURE_CRC32)
#if defined(__SSE4_2__)
#define CRC8(c, p) ((uint32_t)_mm_crc32_u64((c), load64(p)))
#define CRC1(c, b) _mm_crc32_u8((c), (b))
#else
#define CRC8(c, p) __crc32cd((c), load64(p))
#define CRC1(c, b) __crc32cb((c), (b))
#endif
static inline uint64_t load64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* three block sizes, as google-crc32c uses: three streams of each at once */
#define BLOCK0 5440
#define BLOCK1 1360
#define BLOCK2 336
static Shift shift0, shift1, shift2;   /* past one block of each size */

#define STREAMS(BLK, SH)                                                     \
    while (n >= 3 * (BLK)) {                                                 \
        uint32_t a = c, b = 0, d = 0;                                        \
        for (size_t i = 0; i < (BLK); i += 8) {                              \
            a = CRC8(a, p + i);                                              \
            b = CRC8(b, p + (BLK) + i);                                      \
            d = CRC8(d, p + 2 * (BLK) + i);                                  \
        }                                                                    \
        c = shift(&(SH), shift(&(SH), a) ^ b) ^ d;                           \
        p += 3 * (BLK);                                                      \
        n -= 3 * (BLK);                                                      \
    }

static uint32_t crc_raw(uint32_t c, const uint8_t* p, size_t n) {
    STREAMS(BLOCK0, shift0)
    STREAMS(BLOCK1, shift1)
    STREAMS(BLOCK2, shift2)
    for (; n >= 8; n -= 8, p += 8)
        c = CRC8(c, p);
    while (n--)
        c = CRC1(c, *p++);
    return c;
}
#else
static uint32_t crc_raw(uint32_t c, const uint8_t* p, size_t n) { return crc_bytes(c, p, n); }
#endif

static uint32_t crc32c(const uint8_t* p, size_t n) { return ~crc_raw(~0u, p, n); }

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[b] = c;
    }
#if defined(__SSE4_2__) || defined(__ARM_FEATURE_CRC32)
    shift_init(&shift0, BLOCK0);
    shift_init(&shift1, BLOCK1);
    shift_init(&shift2, BLOCK2);
#endif
}

/* ------------------------------------------------------------ parsing */
typedef struct {            /* a bounds-checked cursor; the first error sticks */
    const uint8_t* p;
    size_t pos, end;
    int err;
} Rd;

/* a varint of at most max_bytes bytes whose last byte is at most last_max (it fits its type) */
static inline uint64_t rd_uvarint(Rd* r, int max_bytes, uint8_t last_max) {
    if (!r->err && r->end - r->pos >= 2) {
        const uint8_t* q = r->p + r->pos;
        if (q[0] < 0x80) { r->pos += 1; return q[0]; }
        if (q[1] < 0x80) { r->pos += 2; return (q[0] & 0x7f) | ((uint64_t)q[1] << 7); }
    }
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (r->err || r->pos >= r->end) { r->err = 1; return 0; }
        uint8_t b = r->p[r->pos++];
        if (b < 0x80 && (i < max_bytes - 1 || b <= last_max))
            return v | (uint64_t)b << (7 * i);
        v |= (uint64_t)(b & 0x7f) << (7 * i);
    }
    r->err = 1;
    return 0;
}

static inline int32_t rd_varint(Rd* r) {
    uint32_t v = (uint32_t)rd_uvarint(r, 5, 0x0f);
    return (int32_t)(v >> 1) ^ -(int32_t)(v & 1);
}

static inline int64_t rd_varlong(Rd* r) {
    uint64_t v = rd_uvarint(r, 10, 0x01);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline const uint8_t* rd_bytes(Rd* r, int32_t n) {
    if (n < 0) {
        if (n < -1) r->err = 1;
        return NULL;
    }
    if (r->err || r->end - r->pos < (size_t)n) { r->err = 1; return NULL; }
    r->pos += n;
    return r->p + r->pos - n;
}

static inline uint32_t be32(const uint8_t* p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64(const uint8_t* p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

typedef struct {            /* a binary column: end offsets and data (and key validity bits) */
    int32_t* offs;
    uint8_t* data;
    int32_t len;
} Col;

typedef struct {
    Col key, val;
    uint8_t* key_valid;
    int64_t rows;
    uint64_t sink;          /* parse-only modes: what the parse found, so it is not optimised away */
    uint64_t offset_sum;
} Out;

static inline void gather(Col* c, int64_t row, const uint8_t* p, int32_t n) {
    if (n > 0) {
        memcpy(c->data + c->len, p, (size_t)n);
        c->len += n;
    }
    c->offs[row + 1] = c->len;
}

/* The records of one batch; 0, or -1 if they are malformed. */
static inline __attribute__((always_inline)) int records(const uint8_t* p, size_t n, int32_t count,
                                                         int64_t base_offset, Out* o, int do_gather) {
    Rd r = {p, 0, n, 0};
    for (int32_t i = 0; i < count; i++) {
        int32_t length = rd_varint(&r);
        if (r.err || length < 0 || (size_t)length > r.end - r.pos)
            return -1;
        size_t outer = r.end, end = r.pos + (size_t)length;
        r.end = end;
        if (r.pos >= r.end) return -1;
        r.pos++;                                    /* attributes */
        int64_t ts_delta = rd_varlong(&r);
        int32_t off_delta = rd_varint(&r);
        int32_t kn = rd_varint(&r);
        const uint8_t* k = rd_bytes(&r, kn);
        int32_t vn = rd_varint(&r);
        const uint8_t* v = rd_bytes(&r, vn);
        int32_t hc = rd_varint(&r);
        if (r.err || hc < 0 || (size_t)hc > (r.end - r.pos) / 2)
            return -1;
        for (int32_t j = 0; j < hc; j++) {
            int32_t hkn = rd_varint(&r);
            if (hkn < 0) return -1;
            const uint8_t* hk = rd_bytes(&r, hkn);
            int32_t hvn = rd_varint(&r);
            const uint8_t* hv = rd_bytes(&r, hvn);
            if (!do_gather)
                o->sink += (uintptr_t)hk ^ (uintptr_t)hv;
        }
        if (r.err || r.pos != end)
            return -1;
        r.end = outer;
        o->offset_sum += (uint64_t)(base_offset + off_delta);
        if (do_gather) {
            int64_t row = o->rows;
            if (kn >= 0) o->key_valid[row >> 3] |= (uint8_t)(1 << (row & 7));
            else o->key_valid[row >> 3] &= (uint8_t)~(1 << (row & 7));
            gather(&o->key, row, k, kn);
            gather(&o->val, row, v, vn);
        } else {
            o->sink += (uint64_t)ts_delta + (uint64_t)kn + (uint64_t)vn + (uintptr_t)k + (uintptr_t)v;
        }
        o->rows++;
    }
    return r.pos == n ? 0 : -1;
}

enum { M_PARSE, M_CRC, M_GATHER, M_ALL, NMODES };
static const char* MODE_NAMES[NMODES] = {"parse", "parse+crc", "parse+gather", "all"};

/* One decode call on buf[0:n] (whole batches): the records it found, or -1. */
static inline __attribute__((always_inline)) int64_t call(const uint8_t* buf, size_t n, Out* o, int crc,
                                                          int do_gather) {
    size_t pos = 0;
    o->rows = 0;
    o->key.len = o->val.len = 0;
    o->key.offs[0] = o->val.offs[0] = 0;
    while (pos < n) {
        if (n - pos < V2_HEADER) return -1;
        const uint8_t* b = buf + pos;
        int32_t size = (int32_t)be32(b + 8);
        if (size < V2_HEADER - LOG_OVERHEAD || (size_t)size > n - pos - LOG_OVERHEAD || b[16] != 2)
            return -1;
        size_t total = LOG_OVERHEAD + (size_t)size;
        uint16_t attributes = (uint16_t)(b[21] << 8 | b[22]);
        int32_t count = (int32_t)be32(b + 57);
        if (count < 0 || (attributes & 7))
            return -1;
        if (crc && crc32c(b + V2_CRC_START, total - V2_CRC_START) != be32(b + 17))
            return -1;
        if (records(b + V2_HEADER, total - V2_HEADER, count, (int64_t)be64(b), o, do_gather) < 0)
            return -1;
        pos += total;
    }
    return o->rows;
}

static int64_t run_call(int mode, const uint8_t* buf, size_t n, Out* o) {
    switch (mode) {
    case M_PARSE: return call(buf, n, o, 0, 0);
    case M_CRC: return call(buf, n, o, 1, 0);
    case M_GATHER: return call(buf, n, o, 0, 1);
    default: return call(buf, n, o, 1, 1);
    }
}

/* ------------------------------------------------------------ the cases */
static clockid_t clock_id = CLOCK_MONOTONIC;   /* or the thread's CPU time: "cpu" */

static double now(void) {
    struct timespec t;
    clock_gettime(clock_id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static size_t* cuts;        /* chunk i is buf[cuts[i]:cuts[i + 1]] */
static size_t nchunks;

static void make_chunks(const uint8_t* buf, size_t n, size_t max) {
    size_t pos = 0, start = 0;
    cuts = malloc(sizeof(size_t) * (n / (LOG_OVERHEAD + V2_HEADER) + 2));
    cuts[nchunks = 0] = 0;
    while (pos < n) {
        size_t total = LOG_OVERHEAD + be32(buf + pos + 8);
        if (pos > start && pos + total - start > max)
            cuts[++nchunks] = start = pos;
        pos += total;
    }
    cuts[++nchunks] = n;
}

static void die(const char* what) {
    fprintf(stderr, "floor: %s\n", what);
    exit(1);
}

/* One pass of a case: every call it makes once; the records they found. */
static int64_t pass(int mode, int kase, const uint8_t* buf, size_t n, Out* o, size_t* next) {
    int64_t rows = 0, got;
    if (kase == 0)
        return run_call(mode, buf, n, o);
    if (kase == 1) {
        for (size_t i = 0; i < nchunks; i++) {
            if ((got = run_call(mode, buf + cuts[i], cuts[i + 1] - cuts[i], o)) < 0) return -1;
            rows += got;
        }
        return rows;
    }
    if ((rows = run_call(mode, buf, n, o)) < 0) return -1;      /* the whole, then the next chunk */
    size_t i = (*next)++ % nchunks;
    if ((got = run_call(mode, buf + cuts[i], cuts[i + 1] - cuts[i], o)) < 0) return -1;
    return rows + got;
}

int main(int argc, char** argv) {
    static const char* CASES[3] = {"single", "chunks", "alternate"};
    if (argc != 4 && !(argc == 5 && (!strcmp(argv[4], "wall") || !strcmp(argv[4], "cpu"))))
        die("usage: floor FILE CHUNK_BYTES SECONDS [wall|cpu]");
    if (argc == 5 && !strcmp(argv[4], "cpu"))
        clock_id = CLOCK_THREAD_CPUTIME_ID;
    size_t chunk = (size_t)strtoull(argv[2], NULL, 10);
    double seconds = atof(argv[3]);
    FILE* f = fopen(argv[1], "rb");
    if (!f) die("cannot open the input");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t* buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) die("cannot read the input");
    fclose(f);
    crc_init();
    if (crc32c((const uint8_t*)"123456789", 9) != 0xE3069283u) die("CRC32C check value wrong");
    static uint8_t probe[3 * 5440 + 3 * 1360 + 3 * 336 + 15];   /* every stream size: as the table computes it */
    for (size_t i = 0; i < sizeof probe; i++)
        probe[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t len = sizeof probe; len > 0; len = len * 5 / 7)
        if (crc_raw(~0u, probe, len) != crc_bytes(~0u, probe, len)) die("CRC32C streams disagree with the table");

    Out o;
    memset(&o, 0, sizeof o);
    size_t max_rows = n / 7 + 2;
    o.key.offs = malloc(4 * max_rows);
    o.val.offs = malloc(4 * max_rows);
    o.key_valid = calloc(max_rows / 8 + 1, 1);
    o.key.data = malloc(n + 1);
    o.val.data = malloc(n + 1);
    if (!o.key.offs || !o.val.offs || !o.key_valid || !o.key.data || !o.val.data) die("out of memory");

    /* the whole input once, checked: its records, and a checksum of the keys, values, nulls and offsets */
    int64_t records = run_call(M_ALL, buf, n, &o);
    if (records < 0) die("the input is not well-formed uncompressed v2 batches (or a CRC is wrong)");
    uint32_t h = 0;                 /* CRC32C, extended over each in turn */
    h = ~crc_raw(~h, o.key.data, (size_t)o.key.len);
    h = ~crc_raw(~h, o.val.data, (size_t)o.val.len);
    h = ~crc_raw(~h, (const uint8_t*)o.key.offs, 4 * ((size_t)records + 1));
    h = ~crc_raw(~h, (const uint8_t*)o.val.offs, 4 * ((size_t)records + 1));
    int64_t nulls = 0;
    for (int64_t i = 0; i < records; i++)
        nulls += !(o.key_valid[i >> 3] >> (i & 7) & 1);
    make_chunks(buf, n, chunk);

    printf("{\"crc32c\": \"%s\", \"bytes\": %zu, \"records\": %lld, \"null_keys\": %lld, "
           "\"key_bytes\": %d, \"value_bytes\": %d, \"offset_sum\": %llu, \"checksum\": \"%016llx\", "
           "\"chunks\": %zu, \"results\": {",
           CRC_KIND, n, (long long)records, (long long)nulls, o.key.len, o.val.len,
           (unsigned long long)o.offset_sum, (unsigned long long)h, nchunks);
    for (int m = 0; m < NMODES; m++) {
        printf("%s\"%s\": {", m ? ", " : "", MODE_NAMES[m]);
        for (int k = 0; k < 3; k++) {
            size_t next = 0;
            int64_t rows = 0, got;
            double t0 = now(), t;
            do {
                if ((got = pass(m, k, buf, n, &o, &next)) < 0) die("a call failed on input it had read");
                rows += got;
            } while ((t = now() - t0) < seconds);
            printf("%s\"%s\": %.0f", k ? ", " : "", CASES[k], rows / t);
        }
        printf("}");
    }
    printf("}, \"sink\": %llu}\n", (unsigned long long)(o.sink & 1));
    return 0;
}
