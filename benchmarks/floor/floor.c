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
 * Five modes: parse (walk and parse only), parse+crc, parse+gather, all
 * (parse, CRC and gather of keys and values: what ColumnarDecoder does at
 * least), and columns (all, plus every other column ColumnarDecoder
 * returns: offsets, timestamps and their types, value validity, and the
 * headers as a list of UTF-8-checked keys and nullable values). Three cases,
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
/* every helper of the record walk inlined, whatever the compiler's size limits */
#define HOT static inline __attribute__((always_inline))

typedef struct {            /* a bounds-checked cursor; the first error sticks */
    const uint8_t* p;
    size_t pos, end;
    int err;
} Rd;

/* a varint of at most max_bytes bytes whose last byte is at most last_max (it fits its type) */
HOT uint64_t rd_uvarint(Rd* r, int max_bytes, uint8_t last_max) {
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

HOT int32_t rd_varint(Rd* r) {
    uint32_t v = (uint32_t)rd_uvarint(r, 5, 0x0f);
    return (int32_t)(v >> 1) ^ -(int32_t)(v & 1);
}

HOT int64_t rd_varlong(Rd* r) {
    uint64_t v = rd_uvarint(r, 10, 0x01);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

HOT const uint8_t* rd_bytes(Rd* r, int32_t n) {
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
    /* mode "columns": the rest of what ColumnarDecoder returns */
    int64_t* offset;
    int64_t* ts;
    int32_t* ts_type;
    uint8_t* val_valid;
    int32_t* hdr_offs;      /* each row's end in the header rows */
    uint8_t* hdr_valid;     /* null: a record without headers */
    Col hkey, hval;         /* header keys (UTF-8, checked) and values */
    uint8_t* hval_valid;
    int64_t header_rows;
    int64_t rows;
    uint64_t sink;          /* parse-only modes: what the parse found, so it is not optimised away */
    uint64_t offset_sum;
} Out;

/* Append p[0:n] to a column: up to 32 bytes as two fixed 16-byte moves
 * where p may be read 32 bytes on (before limit, the end of the batch's
 * records; the column has 32 bytes of slack), else memcpy. */
HOT void gather(Col* c, int64_t row, const uint8_t* p, int32_t n, const uint8_t* limit) {
    if (n > 0) {
        uint8_t* d = c->data + c->len;
        if (n <= 32 && limit - p >= 32) {
            memcpy(d, p, 16);
            memcpy(d + 16, p + 16, 16);
        } else {
            memcpy(d, p, (size_t)n);
        }
        c->len += n;
    }
    c->offs[row + 1] = c->len;
}

HOT void set_bit(uint8_t* bits, int64_t i, int valid) {
    if (valid) bits[i >> 3] |= (uint8_t)(1 << (i & 7));
    else bits[i >> 3] &= (uint8_t)~(1 << (i & 7));
}

typedef struct {            /* one record, parsed up to its headers */
    size_t outer, end;      /* the batch's end, and the record's */
    int64_t ts_delta;
    int32_t off_delta, kn, vn, hc;
    const uint8_t *k, *v;
} Rec;

/* Parse a record up to its header count, leaving r bounded by the
 * record's end at its first header; 0, or -1 if malformed. */
HOT int rec_head(Rd* r, Rec* h) {
    int32_t length = rd_varint(r);
    if (r->err || length < 0 || (size_t)length > r->end - r->pos)
        return -1;
    h->outer = r->end;
    h->end = r->end = r->pos + (size_t)length;
    if (r->pos >= r->end) return -1;
    r->pos++;                                       /* attributes */
    h->ts_delta = rd_varlong(r);
    h->off_delta = rd_varint(r);
    h->kn = rd_varint(r);
    h->k = rd_bytes(r, h->kn);
    h->vn = rd_varint(r);
    h->v = rd_bytes(r, h->vn);
    h->hc = rd_varint(r);
    return r->err || h->hc < 0 || (size_t)h->hc > (r->end - r->pos) / 2 ? -1 : 0;
}

/* One header: a key (never null) and a value (may be null); -1 if the key's length is negative. */
HOT int rd_header(Rd* r, const uint8_t** k, int32_t* kn, const uint8_t** v, int32_t* vn) {
    if ((*kn = rd_varint(r)) < 0) return -1;
    *k = rd_bytes(r, *kn);
    *v = rd_bytes(r, *vn = rd_varint(r));
    return 0;
}

/* Close a record whose headers were read: 0, or -1 if it did not end where its length said. */
HOT int rec_end(Rd* r, const Rec* h) {
    if (r->err || r->pos != h->end)
        return -1;
    r->end = h->outer;
    return 0;
}

/* The records of one batch; 0, or -1 if they are malformed. */
HOT int records(const uint8_t* p, size_t n, int32_t count,
                                                         int64_t base_offset, Out* o, int do_gather) {
    Rd r = {p, 0, n, 0};
    for (int32_t i = 0; i < count; i++) {
        Rec h;
        if (rec_head(&r, &h) < 0)
            return -1;
        for (int32_t j = 0; j < h.hc; j++) {
            const uint8_t *hk, *hv;
            int32_t hkn, hvn;
            if (rd_header(&r, &hk, &hkn, &hv, &hvn) < 0) return -1;
            if (!do_gather)
                o->sink += (uintptr_t)hk ^ (uintptr_t)hv;
        }
        if (rec_end(&r, &h) < 0)
            return -1;
        o->offset_sum += (uint64_t)(base_offset + h.off_delta);
        if (do_gather) {
            int64_t row = o->rows;
            set_bit(o->key_valid, row, h.kn >= 0);
            gather(&o->key, row, h.k, h.kn, p + n);
            gather(&o->val, row, h.v, h.vn, p + n);
        } else {
            o->sink += (uint64_t)h.ts_delta + (uint64_t)h.kn + (uint64_t)h.vn + (uintptr_t)h.k + (uintptr_t)h.v;
        }
        o->rows++;
    }
    return r.pos == n ? 0 : -1;
}

/* Whether s[0:n] is valid UTF-8, byte by byte (past ASCII: see utf8_valid). */
static int utf8_slow(const uint8_t* s, int32_t n) {
    int32_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n) return 0;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
                || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* Whether s[0:n] is valid UTF-8 (a header key is a string): eight bytes
 * at a time while they are ASCII, the last few as one masked word where s
 * may be read 8 bytes on (up to limit), the rest byte by byte. */
static inline int utf8_valid(const uint8_t* s, int32_t n, const uint8_t* limit) {
    int32_t i = 0;
    while (i + 8 <= n && !(load64(s + i) & 0x8080808080808080ULL)) i += 8;
    if (i == n || (n - i < 8 && limit - (s + i) >= 8
                   && !(load64(s + i) & (((uint64_t)1 << (8 * (n - i))) - 1) & 0x8080808080808080ULL)))
        return 1;
    return utf8_slow(s + i, n - i);
}

/* Mode "columns": every column ColumnarDecoder returns, for the records of
 * one batch: offset, timestamp and its type, key and value (each with a
 * validity bitmap), and the headers as a list (row offsets and validity) of
 * UTF-8 keys and nullable values. 0, or -1 if malformed (a header key that
 * is not UTF-8 too: ColumnarDecoder replaces it, the floor need not). */
HOT int records_columns(const uint8_t* p, size_t n, int32_t count,
                                                                 int64_t base_offset, int64_t first_ts,
                                                                 int64_t max_ts, int log_append, Out* o) {
    Rd r = {p, 0, n, 0};
    for (int32_t i = 0; i < count; i++) {
        Rec h;
        if (rec_head(&r, &h) < 0)
            return -1;
        int64_t row = o->rows;
        for (int32_t j = 0; j < h.hc; j++) {
            const uint8_t *hk, *hv;
            int32_t hkn, hvn;
            if (rd_header(&r, &hk, &hkn, &hv, &hvn) < 0) return -1;
            if (r.err || !utf8_valid(hk, hkn, p + n)) return -1;
            int64_t hr = o->header_rows++;
            gather(&o->hkey, hr, hk, hkn, p + n);
            gather(&o->hval, hr, hv, hvn, p + n);
            set_bit(o->hval_valid, hr, hvn >= 0);
        }
        if (rec_end(&r, &h) < 0)
            return -1;
        o->offset_sum += (uint64_t)(base_offset + h.off_delta);
        o->offset[row] = base_offset + h.off_delta;
        o->ts[row] = log_append ? max_ts : (int64_t)((uint64_t)first_ts + (uint64_t)h.ts_delta);
        o->ts_type[row] = log_append;
        set_bit(o->key_valid, row, h.kn >= 0);
        set_bit(o->val_valid, row, h.vn >= 0);
        set_bit(o->hdr_valid, row, h.hc > 0);
        gather(&o->key, row, h.k, h.kn, p + n);
        gather(&o->val, row, h.v, h.vn, p + n);
        o->hdr_offs[row + 1] = (int32_t)o->header_rows;
        o->rows++;
    }
    return r.pos == n ? 0 : -1;
}

enum { M_PARSE, M_CRC, M_GATHER, M_ALL, M_COLUMNS, NMODES };
static const char* MODE_NAMES[NMODES] = {"parse", "parse+crc", "parse+gather", "all", "columns"};

/* One decode call on buf[0:n] (whole batches): the records it found, or -1. */
HOT int64_t call(const uint8_t* buf, size_t n, Out* o, int crc,
                                                          int do_gather, int columns) {
    size_t pos = 0;
    o->rows = o->header_rows = 0;
    o->key.len = o->val.len = o->hkey.len = o->hval.len = 0;
    o->key.offs[0] = o->val.offs[0] = 0;
    if (columns)
        o->hkey.offs[0] = o->hval.offs[0] = o->hdr_offs[0] = 0;
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
        if (columns) {
            if (records_columns(b + V2_HEADER, total - V2_HEADER, count, (int64_t)be64(b), (int64_t)be64(b + 27),
                                (int64_t)be64(b + 35), (attributes >> 3) & 1, o) < 0)
                return -1;
        } else if (records(b + V2_HEADER, total - V2_HEADER, count, (int64_t)be64(b), o, do_gather) < 0) {
            return -1;
        }
        pos += total;
    }
    return o->rows;
}

static int64_t run_call(int mode, const uint8_t* buf, size_t n, Out* o) {
    switch (mode) {
    case M_PARSE: return call(buf, n, o, 0, 0, 0);
    case M_CRC: return call(buf, n, o, 1, 0, 0);
    case M_GATHER: return call(buf, n, o, 0, 1, 0);
    case M_ALL: return call(buf, n, o, 1, 1, 0);
    default: return call(buf, n, o, 1, 1, 1);
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
    o.key.data = malloc(n + 32);
    o.val.data = malloc(n + 32);
    o.offset = malloc(8 * max_rows);
    o.ts = malloc(8 * max_rows);
    o.ts_type = malloc(4 * max_rows);
    o.val_valid = calloc(max_rows / 8 + 1, 1);
    o.hdr_offs = malloc(4 * max_rows);
    o.hdr_valid = calloc(max_rows / 8 + 1, 1);
    size_t max_headers = n / 2 + 2;         /* a header takes at least 2 bytes */
    o.hkey.offs = malloc(4 * max_headers);
    o.hval.offs = malloc(4 * max_headers);
    o.hkey.data = malloc(n + 32);
    o.hval.data = malloc(n + 32);
    o.hval_valid = calloc(max_headers / 8 + 1, 1);
    if (!o.key.offs || !o.val.offs || !o.key_valid || !o.key.data || !o.val.data || !o.offset || !o.ts
            || !o.ts_type || !o.val_valid || !o.hdr_offs || !o.hdr_valid || !o.hkey.offs || !o.hval.offs
            || !o.hkey.data || !o.hval.data || !o.hval_valid)
        die("out of memory");

    /* the whole input once, checked: its records, and a checksum of the keys, values, nulls and offsets */
    int64_t records = run_call(M_ALL, buf, n, &o);
    uint64_t offset_sum = o.offset_sum;     /* (mode columns adds to it again) */
    if (records >= 0 && run_call(M_COLUMNS, buf, n, &o) != records) records = -1;
    o.offset_sum = offset_sum;
    if (records < 0) die("the input is not well-formed uncompressed v2 batches (or a CRC is wrong)");
    uint32_t h = 0;                 /* CRC32C, extended over each in turn */
    h = ~crc_raw(~h, o.key.data, (size_t)o.key.len);
    h = ~crc_raw(~h, o.val.data, (size_t)o.val.len);
    h = ~crc_raw(~h, (const uint8_t*)o.key.offs, 4 * ((size_t)records + 1));
    h = ~crc_raw(~h, (const uint8_t*)o.val.offs, 4 * ((size_t)records + 1));
    int64_t nulls = 0;
    for (int64_t i = 0; i < records; i++)
        nulls += !(o.key_valid[i >> 3] >> (i & 7) & 1);
    /* what mode "columns" adds, checked the same way: the offsets, timestamps and their types, and the
       headers (row offsets, key and value data and offsets); nulls of values, header lists and header values */
    uint32_t hc = 0;
    hc = ~crc_raw(~hc, (const uint8_t*)o.offset, 8 * (size_t)records);
    hc = ~crc_raw(~hc, (const uint8_t*)o.ts, 8 * (size_t)records);
    hc = ~crc_raw(~hc, (const uint8_t*)o.ts_type, 4 * (size_t)records);
    hc = ~crc_raw(~hc, (const uint8_t*)o.hdr_offs, 4 * ((size_t)records + 1));
    hc = ~crc_raw(~hc, o.hkey.data, (size_t)o.hkey.len);
    hc = ~crc_raw(~hc, (const uint8_t*)o.hkey.offs, 4 * ((size_t)o.header_rows + 1));
    hc = ~crc_raw(~hc, o.hval.data, (size_t)o.hval.len);
    hc = ~crc_raw(~hc, (const uint8_t*)o.hval.offs, 4 * ((size_t)o.header_rows + 1));
    int64_t null_values = 0, null_header_lists = 0, null_header_values = 0;
    for (int64_t i = 0; i < records; i++) {
        null_values += !(o.val_valid[i >> 3] >> (i & 7) & 1);
        null_header_lists += !(o.hdr_valid[i >> 3] >> (i & 7) & 1);
    }
    for (int64_t i = 0; i < o.header_rows; i++)
        null_header_values += !(o.hval_valid[i >> 3] >> (i & 7) & 1);
    make_chunks(buf, n, chunk);

    printf("{\"crc32c\": \"%s\", \"bytes\": %zu, \"records\": %lld, \"null_keys\": %lld, "
           "\"key_bytes\": %d, \"value_bytes\": %d, \"offset_sum\": %llu, \"checksum\": \"%016llx\", "
           "\"header_rows\": %lld, \"null_values\": %lld, \"null_header_lists\": %lld, "
           "\"null_header_values\": %lld, \"columns_checksum\": \"%016llx\", \"chunks\": %zu, \"results\": {",
           CRC_KIND, n, (long long)records, (long long)nulls, o.key.len, o.val.len,
           (unsigned long long)o.offset_sum, (unsigned long long)h, (long long)o.header_rows,
           (long long)null_values, (long long)null_header_lists, (long long)null_header_values,
           (unsigned long long)hc, nchunks);
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
