/* The compiled core of crawler.content.fingerprints: word count and SimHash of a text in one pass.
 *
 * It computes exactly what the numpy reference (_numpy_word_hashes, _numpy_features,
 * _numpy_votes_to_fingerprint in fingerprints.py) computes, bit for bit: fingerprints are
 * stored in Parquet and compared across runs, so the two must never disagree.
 *
 *   words     maximal runs of the code points of text.lower() marked in the 0x110000-entry
 *             \w table
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
 * as non-word). The GIL is released during the scan (the str is immutable, and referenced by
 * the caller or, for a lowered copy, by run()).
 *
 * The table, the multipliers and the constants come from Python once, through init(),
 * so fingerprints.py stays the one place that defines them.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define N_CODEPOINTS 0x110000

/* Word-character bitmap over all code points (136 KB, built from the bool table). */
static uint64_t word_bits[N_CODEPOINTS / 64];
/* The one-byte (Latin-1) storage kind: byte -> its code point when a word character, else 0
 * (no word character is U+0000); latin1_lower_word[] lowers it first. str.lower() maps every
 * Latin-1 character to one Latin-1 character whatever its context (fingerprints._latin1_lower
 * checks that on Python's own lower() before passing the mapping to init()), so an exact str
 * of that kind, most pages, is lowered here byte by byte instead of by a lower() copy. */
static uint64_t latin1_word[256];
static uint64_t latin1_lower_word[256];
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

/* A word ended; `x` is its sum of multiplied code points XOR length * LEN_MUL. Its hash joins
 * the window and completes a feature once the window is full. */
static inline void
add_word(state_t *s, uint64_t x)
{
    uint64_t w = mix64(x);
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

/* The scan, once per storage width: `v` is the (lowered) code point when it is a word
 * character, else 0; `h` and `len` carry the word in progress. The branch per character is
 * mispredicted at most word boundaries, and that is most of the cost (~3.8 cycles per
 * character of an ASCII page); a branch-free variant (every character stores the hash so
 * far, a counter advances where a word ends) needs ~20 instructions per character and
 * measured 10% slower, two tight loops (skip, then word) the same as this one. */
#define DEFINE_SCAN(NAME, CHAR_T, WORD_CP)                                        \
    static void NAME(const CHAR_T *p, Py_ssize_t n, state_t *s, const uint64_t *table) \
    {                                                                             \
        uint64_t h = 0, len = 0;                                                  \
        for (Py_ssize_t i = 0; i < n; i++) {                                      \
            uint64_t v = WORD_CP(p[i]);                                           \
            if (v) {                                                              \
                h += v * pos_mul[len & 63];                                       \
                len++;                                                            \
            }                                                                     \
            else if (len) {                                                       \
                add_word(s, h ^ (len * len_mul));                                 \
                h = 0;                                                            \
                len = 0;                                                          \
            }                                                                     \
        }                                                                         \
        if (len)                                                                  \
            add_word(s, h ^ (len * len_mul));                                     \
    }

/* Code points of a str are below 0x110000; the guard keeps the read in bounds anyway. */
#define WORD_CP_WIDE(cp) \
    ((uint64_t)(cp) & -(uint64_t)((cp) < N_CODEPOINTS && ((word_bits[(cp) >> 6] >> ((cp) & 63)) & 1)))
#define WORD_CP_TABLE(c) (table[c]) /* the one-byte kind: latin1_word or latin1_lower_word */

DEFINE_SCAN(scan_ucs1, Py_UCS1, WORD_CP_TABLE)
DEFINE_SCAN(scan_ucs2, Py_UCS2, WORD_CP_WIDE)
DEFINE_SCAN(scan_ucs4, Py_UCS4, WORD_CP_WIDE)

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

/* Whether init() got the Latin-1 lowering (else every text goes through its lower()). */
static int folds_latin1 = 0;

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
    PyObject *low = NULL; /* owned: the lowered copy, when one is made */
    const uint64_t *latin1 = latin1_lower_word;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return -1;
#endif
    /* A subclass may define its own lower(), which the numpy path calls: so does this one. */
    if (!(folds_latin1 && PyUnicode_CheckExact(text) && PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND)) {
        low = PyObject_CallMethod(text, "lower", NULL);
        if (low == NULL)
            return -1;
        if (!PyUnicode_Check(low)) {
            PyErr_Format(PyExc_TypeError, "lower() returned %.200s, not str", Py_TYPE(low)->tp_name);
            Py_DECREF(low);
            return -1;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(low) < 0) {
            Py_DECREF(low);
            return -1;
        }
#endif
        text = low;
        latin1 = latin1_word; /* lowered already: lowering again is not lower()'s result */
    }
    memset(s, 0, sizeof(*s));
    s->shingle = shingle;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_BEGIN_ALLOW_THREADS
    if (kind == PyUnicode_1BYTE_KIND)
        scan_ucs1((const Py_UCS1 *)data, n, s, latin1);
    else if (kind == PyUnicode_2BYTE_KIND)
        scan_ucs2((const Py_UCS2 *)data, n, s, NULL);
    else
        scan_ucs4((const Py_UCS4 *)data, n, s, NULL);
    Py_END_ALLOW_THREADS
    Py_XDECREF(low);
    return 0;
}

PyDoc_STRVAR(fingerprint_doc,
"fingerprint(text, shingle, /) -> (word_count, simhash)\n\n"
"Word count and unsigned 64-bit SimHash of text.lower() over shingle-word shingles\n"
"(shingle 1, 2 or 3); the SimHash is 0 when there are no words.");

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
"init(table, pos_mul, latin1_lower, len_mul, shingle_mul, salt1, salt2, sm1, sm2, /)\n\n"
"Load the word-character table (0x110000 bytes, nonzero = \\w), the 64 per-position\n"
"multipliers (512 bytes of native-endian uint64), str.lower() of each Latin-1 character\n"
"(256 bytes; None to lower every text with its lower()) and the constants. Once only:\n"
"a second call raises (scans may be running without the GIL).");

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
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "init() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    if (ready) {
        PyErr_SetString(PyExc_RuntimeError, "_simhash.init() was already called");
        return NULL;
    }
    uint64_t c[6];
    for (int i = 0; i < 6; i++) {
        if (as_u64(args[3 + i], &c[i]) < 0)
            return NULL;
    }
    Py_buffer table, mul, fold;
    int has_fold = args[2] != Py_None;
    if (PyObject_GetBuffer(args[0], &table, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &mul, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    if (has_fold && PyObject_GetBuffer(args[2], &fold, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&table);
        PyBuffer_Release(&mul);
        return NULL;
    }
    PyObject *result = NULL;
    if (table.len != N_CODEPOINTS || mul.len != 64 * (Py_ssize_t)sizeof(uint64_t) || (has_fold && fold.len != 256)) {
        PyErr_Format(PyExc_ValueError,
                     "init(): table must be %d bytes, pos_mul 512 and latin1_lower 256, got %zd, %zd and %zd",
                     N_CODEPOINTS, table.len, mul.len, has_fold ? fold.len : (Py_ssize_t)256);
        goto done;
    }
    const uint8_t *t = (const uint8_t *)table.buf;
    memset(word_bits, 0, sizeof(word_bits));
    for (uint32_t cp = 0; cp < N_CODEPOINTS; cp++) {
        if (t[cp])
            word_bits[cp >> 6] |= (uint64_t)1 << (cp & 63);
    }
    for (int b = 0; b < 256; b++) {
        uint8_t lc = has_fold ? ((const uint8_t *)fold.buf)[b] : (uint8_t)b;
        latin1_word[b] = t[b] ? (uint64_t)b : 0;
        latin1_lower_word[b] = t[lc] ? lc : 0;
    }
    folds_latin1 = has_fold;
    memcpy(pos_mul, mul.buf, sizeof(pos_mul));
    len_mul = c[0];
    shingle_mul = c[1];
    salt1 = c[2];
    salt2 = c[3];
    sm1 = c[4];
    sm2 = c[5];
    ready = 1;
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&mul);
    if (has_fold)
        PyBuffer_Release(&fold);
    return result;
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
    PyObject *m;
    for (int x = 0; x < 256; x++) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            v |= (uint64_t)((x >> i) & 1) << (8 * i);
        spread[x] = v;
    }
    m = PyModule_Create(&module);
    /* fingerprints.py uses this module only when VERSION is the one it expects: an editable
     * install does not rebuild the .so when this file changes, and a stale core must fall
     * back to numpy, not compute other values. Bump it with every change of behaviour or
     * of init()'s arguments. */
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
