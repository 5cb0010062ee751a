/* The compiled core of crawler.content.fingerprints: SimHash of a lowered text in one pass.
 *
 * It computes exactly what the numpy reference (_numpy_word_hashes, _numpy_features,
 * _numpy_votes_to_fingerprint in fingerprints.py) computes, bit for bit: fingerprints are
 * stored in Parquet and compared across runs, so the two must never disagree.
 *
 *   words     maximal runs of code points marked in the 0x110000-entry \w table
 *   word hash h = sum over its code points of cp * POS_MUL[pos & 63] (wrapping uint64),
 *             h ^= length * LEN_MUL, then the SplitMix64 finalizer
 *   features  windows of `shingle` consecutive word hashes, acc = acc * SHINGLE_MUL +
 *             (w[j] ^ SALT[j]), then the finalizer; a one-word window is the word hash
 *             itself; a text shorter than one window is one feature of all its words
 *   votes     bit j of the fingerprint is set iff more than half the features have it
 *
 * One pass over the string's own storage (PyUnicode_DATA, 1, 2 or 4 bytes per code point),
 * with the last two word hashes and 64 vote counters as the only state: memory does not
 * grow with the text. Lone surrogates are code points like any other (the table marks them
 * as non-word). The GIL is released during the scan (the str is immutable and the caller
 * holds it).
 *
 * The table, the multipliers and the constants come from Python once, through init(),
 * so fingerprints.py stays the one place that defines them.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define N_CODEPOINTS 0x110000

/* Word-character bitmap over all code points (136 KB, built from the bool table) and a byte
 * table for the one-byte (Latin-1) string kind, the common case. */
static uint64_t word_bits[N_CODEPOINTS / 64];
static uint8_t word_latin1[256];
static uint64_t pos_mul[64];
static uint64_t len_mul, shingle_mul, salt1, salt2, sm1, sm2;
static int ready = 0;

/* spread[x]: byte i is bit i of x, so adding spread[(f >> 8b) & 0xff] into lane b counts the
 * bits 8b..8b+7 of feature f in eight one-byte counters at once (flushed before 255). */
static uint64_t spread[256];

static inline uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= sm1;
    x ^= x >> 27;
    x *= sm2;
    x ^= x >> 31;
    return x;
}

typedef struct {
    int shingle;          /* 1, 2 or 3 */
    uint64_t nwords;      /* words seen so far */
    uint64_t prev1;       /* the last word hash */
    uint64_t prev2;       /* the one before it */
    uint64_t nfeatures;   /* features voted */
    unsigned pending;     /* features in the lanes since the last flush (< 255) */
    uint64_t lanes[8];    /* eight one-byte bit counters per lane */
    uint64_t votes[64];   /* per-bit totals */
} state_t;

static void
flush(state_t *s)
{
    for (int b = 0; b < 8; b++) {
        uint64_t lane = s->lanes[b];
        for (int i = 0; i < 8; i++)
            s->votes[8 * b + i] += (lane >> (8 * i)) & 0xff;
        s->lanes[b] = 0;
    }
    s->pending = 0;
}

static inline void
vote(state_t *s, uint64_t f)
{
    for (int b = 0; b < 8; b++)
        s->lanes[b] += spread[(f >> (8 * b)) & 0xff];
    s->nfeatures++;
    if (++s->pending == 255)
        flush(s);
}

/* A word ended: its hash joins the window and completes a feature once the window is full. */
static inline void
add_word(state_t *s, uint64_t h, uint64_t length)
{
    uint64_t w = mix64(h ^ (length * len_mul));
    s->nwords++;
    if (s->shingle == 1) {
        vote(s, w);
    }
    else if (s->shingle == 2) {
        if (s->nwords >= 2)
            vote(s, mix64(s->prev1 * shingle_mul + (w ^ salt1)));
    }
    else if (s->nwords >= 3) {
        uint64_t acc = s->prev2 * shingle_mul + (s->prev1 ^ salt1);
        vote(s, mix64(acc * shingle_mul + (w ^ salt2)));
    }
    s->prev2 = s->prev1;
    s->prev1 = w;
}

/* The scan, once per storage width. `h` and `len` carry the word in progress. */
#define DEFINE_SCAN(NAME, CHAR_T, IS_WORD)                                        \
    static void NAME(const CHAR_T *p, Py_ssize_t n, state_t *s)                   \
    {                                                                             \
        uint64_t h = 0, len = 0;                                                  \
        for (Py_ssize_t i = 0; i < n; i++) {                                      \
            uint32_t cp = p[i];                                                   \
            if (IS_WORD(cp)) {                                                    \
                h += (uint64_t)cp * pos_mul[len & 63];                            \
                len++;                                                            \
            }                                                                     \
            else if (len) {                                                       \
                add_word(s, h, len);                                              \
                h = 0;                                                            \
                len = 0;                                                          \
            }                                                                     \
        }                                                                         \
        if (len)                                                                  \
            add_word(s, h, len);                                                  \
    }

#define IS_WORD_LATIN1(cp) (word_latin1[cp])
#define IS_WORD_WIDE(cp) \
    ((cp) < N_CODEPOINTS && ((word_bits[(cp) >> 6] >> ((cp) & 63)) & 1))

DEFINE_SCAN(scan_ucs1, Py_UCS1, IS_WORD_LATIN1)
DEFINE_SCAN(scan_ucs2, Py_UCS2, IS_WORD_WIDE)
DEFINE_SCAN(scan_ucs4, Py_UCS4, IS_WORD_WIDE)

/* The fingerprint once the text is consumed (0 when there were no words). */
static uint64_t
finish(state_t *s)
{
    if (s->nwords == 0)
        return 0;
    if (s->nwords < (uint64_t)s->shingle) {
        /* Shorter than one window: one feature of all its words (1 or 2 of them). */
        if (s->nwords == 1)
            vote(s, s->prev1);
        else
            vote(s, mix64(s->prev2 * shingle_mul + (s->prev1 ^ salt1)));
    }
    flush(s);
    uint64_t fp = 0;
    for (int j = 0; j < 64; j++) {
        /* Ties (exactly half) give 0. votes <= nfeatures < 2**63, so 2 * votes cannot wrap. */
        if (s->votes[j] * 2 > s->nfeatures)
            fp |= (uint64_t)1 << j;
    }
    return fp;
}

static int
run(PyObject *text, int shingle, state_t *s)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.200s", Py_TYPE(text)->tp_name);
        return -1;
    }
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_simhash.init() has not been called");
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return -1;
#endif
    memset(s, 0, sizeof(*s));
    s->shingle = shingle;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_BEGIN_ALLOW_THREADS
    if (kind == PyUnicode_1BYTE_KIND)
        scan_ucs1((const Py_UCS1 *)data, n, s);
    else if (kind == PyUnicode_2BYTE_KIND)
        scan_ucs2((const Py_UCS2 *)data, n, s);
    else
        scan_ucs4((const Py_UCS4 *)data, n, s);
    Py_END_ALLOW_THREADS
    return 0;
}

PyDoc_STRVAR(fingerprint_doc,
"fingerprint(lowered, shingle, /) -> (word_count, simhash)\n\n"
"Word count and unsigned 64-bit SimHash of an already lowered str over shingle-word\n"
"shingles (shingle 1, 2 or 3); the SimHash is 0 when there are no words.");

static PyObject *
fingerprint(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "fingerprint() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    long shingle = PyLong_AsLong(args[1]);
    if (shingle == -1 && PyErr_Occurred())
        return NULL;
    if (shingle < 1 || shingle > 3) {
        PyErr_Format(PyExc_ValueError, "shingle must be 1, 2 or 3, got %ld", shingle);
        return NULL;
    }
    state_t s;
    if (run(args[0], (int)shingle, &s) < 0)
        return NULL;
    uint64_t fp = finish(&s);
    return Py_BuildValue("(KK)", (unsigned long long)s.nwords, (unsigned long long)fp);
}

PyDoc_STRVAR(init_doc,
"init(table, pos_mul, len_mul, shingle_mul, salt1, salt2, sm1, sm2, /)\n\n"
"Load the word-character table (0x110000 bytes, nonzero = \\w), the 64 per-position\n"
"multipliers (512 bytes of native-endian uint64) and the constants. Call once.");

static int
as_u64(PyObject *o, uint64_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static PyObject *
init(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "init() takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    uint64_t c[6];
    for (int i = 0; i < 6; i++) {
        if (as_u64(args[2 + i], &c[i]) < 0)
            return NULL;
    }
    Py_buffer table, mul;
    if (PyObject_GetBuffer(args[0], &table, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &mul, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    if (table.len != N_CODEPOINTS || mul.len != 64 * (Py_ssize_t)sizeof(uint64_t)) {
        PyErr_Format(PyExc_ValueError, "init(): table must be %d bytes and pos_mul 512 bytes, got %zd and %zd",
                     N_CODEPOINTS, table.len, mul.len);
        PyBuffer_Release(&table);
        PyBuffer_Release(&mul);
        return NULL;
    }
    const uint8_t *t = (const uint8_t *)table.buf;
    memset(word_bits, 0, sizeof(word_bits));
    for (uint32_t cp = 0; cp < N_CODEPOINTS; cp++) {
        if (t[cp])
            word_bits[cp >> 6] |= (uint64_t)1 << (cp & 63);
    }
    for (int cp = 0; cp < 256; cp++)
        word_latin1[cp] = t[cp] != 0;
    memcpy(pos_mul, mul.buf, sizeof(pos_mul));
    len_mul = c[0];
    shingle_mul = c[1];
    salt1 = c[2];
    salt2 = c[3];
    sm1 = c[4];
    sm2 = c[5];
    PyBuffer_Release(&table);
    PyBuffer_Release(&mul);
    ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))init, METH_FASTCALL, init_doc},
    {"fingerprint", (PyCFunction)(void (*)(void))fingerprint, METH_FASTCALL, fingerprint_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "crawler.content._simhash",
    "Compiled SimHash core of crawler.content.fingerprints (see _simhash.c).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__simhash(void)
{
    for (int x = 0; x < 256; x++) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            v |= (uint64_t)((x >> i) & 1) << (8 * i);
        spread[x] = v;
    }
    return PyModule_Create(&module);
}
