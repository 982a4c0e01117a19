/* localllm native shim: fills llama.cpp's by-value structs in C and hands
 * Python opaque handles, so no Python code mirrors a C struct layout.
 * Declarations and contracts are in shim.h (which is also the cffi cdef). */

/* sigaction, nanosleep and write under -std=c11. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#if !defined(_WIN32)
#include <signal.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(_WIN32)
#include <windows.h>
#else
#include <unistd.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"
#include "shim.h"

#ifndef LL_BUILD_SOURCE
#define LL_BUILD_SOURCE "unknown"
#endif
#ifndef LL_BUILD_LCP_VERSION
#define LL_BUILD_LCP_VERSION ""
#endif
#ifndef LL_BUILD_HEADER_SHA256
#define LL_BUILD_HEADER_SHA256 ""
#endif

struct ll_model {
    struct llama_model *model;
    const struct llama_vocab *vocab;
    /* Tokens a grammar must never let through, found on the first grammar sampler:
       llama.cpp's grammar matches a token by its text written out as special
       ("<unk>", "<s>"), which the reply never shows: under a JSON grammar the tiny
       test model wrote <unk> until its context was full, the grammar reading "<unk>"
       inside a string that never closed.  Also any token whose text holds a NUL byte
       (SentencePiece's <0x00>), which a C-string match would read as empty. */
    llama_logit_bias *nul_bias;
    int32_t n_nul;
    int nul_scanned;
};

struct ll_context {
    struct llama_context *ctx;
    ll_model *m;
    int32_t n_vocab;
    struct llama_sampler *keeper; /* device sampling: the chain on no slot's sequence */
};

static struct llama_sampler *keeper_new(void);

struct ll_batch {
    struct llama_batch b;
    int cap;
};

struct ll_sampler {
    struct llama_sampler *chain;
    struct llama_sampler *penalties; /* owned by chain; NULL when off */
    struct llama_sampler *dry;       /* owned by chain; NULL when off */
    int32_t argmax_vocab;            /* > 0: plain greedy, sampled by argmax over logits */
    int32_t top_k;                   /* > 0: top-k is the chain's first cut (see sample) */
    int32_t n_vocab;
    llama_token_data *cand;          /* top_k candidates, reused every token */
    struct llama_context *on;        /* attached for sampling on the device (ll_sampler_attach) */
    int32_t seq;                     /* the sequence it is attached to */
};

struct ll_lora {
    struct llama_adapter_lora *adapter;
};

/* ---- build and system ---------------------------------------------------- */

void ll_backend_init(const char *backend_dir) {
    /* A core built with GGML_BACKEND_DL has no CPU backend linked in: ggml scores each
     * variant module in the core's folder against this processor and loads the best.
     * A core with the CPU backend linked (a native build, a prefix) already has one. */
    if (backend_dir && *backend_dir && ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU) == NULL) {
        ggml_backend_load_all_from_path(backend_dir);
    }
    llama_backend_init();
}
int ll_has_cpu_backend(void) { return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU) != NULL; }
const char *ll_system_info(void) { return llama_print_system_info(); }
const char *ll_llama_version(void) { return llama_version(); }
const char *ll_build_source(void) { return LL_BUILD_SOURCE; }
const char *ll_build_lcp_version(void) { return LL_BUILD_LCP_VERSION; }
const char *ll_build_header_sha256(void) { return LL_BUILD_HEADER_SHA256; }
int ll_supports_gpu_offload(void) { return llama_supports_gpu_offload(); }
int ll_supports_mmap(void) { return llama_supports_mmap(); }

/* ---- logging ------------------------------------------------------------- */

/* A bounded buffer: llama.cpp logs from its own threads, so a mutex guards it,
 * and when full the oldest half is dropped (recent lines matter most). */
#define LL_LOG_CAP (256 * 1024)
static char g_log[LL_LOG_CAP];
static size_t g_log_len = 0;
static int g_log_min = 2;
static int g_log_echo = 0;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_last_level = 2;

static void ll_log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    /* GGML_LOG_LEVEL_CONT continues the previous line at its level. */
    int lvl = level == GGML_LOG_LEVEL_CONT ? g_last_level : (int)level;
    g_last_level = lvl;
    if (lvl < g_log_min || text == NULL) return;
    if (g_log_echo) fputs(text, stderr);
    size_t n = strlen(text);
    pthread_mutex_lock(&g_log_mu);
    if (n >= LL_LOG_CAP / 2) n = LL_LOG_CAP / 2 - 1;
    if (g_log_len + n >= LL_LOG_CAP) {
        size_t drop = g_log_len / 2;
        memmove(g_log, g_log + drop, g_log_len - drop);
        g_log_len -= drop;
    }
    memcpy(g_log + g_log_len, text, n);
    g_log_len += n;
    pthread_mutex_unlock(&g_log_mu);
}

void ll_log_capture(int min_level, int echo) {
    g_log_min = min_level;
    g_log_echo = echo;
    llama_log_set(ll_log_cb, NULL);
    /* libmtmd (and its clip loader) log through their own hook. */
    mtmd_helper_log_set(ll_log_cb, NULL);
}

int ll_log_take(char *buf, int len) {
    if (len <= 0) return 0;
    pthread_mutex_lock(&g_log_mu);
    size_t n = g_log_len < (size_t)(len - 1) ? g_log_len : (size_t)(len - 1);
    memcpy(buf, g_log, n);
    buf[n] = '\0';
    memmove(g_log, g_log + n, g_log_len - n);
    g_log_len -= n;
    pthread_mutex_unlock(&g_log_mu);
    return (int)n;
}

/* ---- devices ------------------------------------------------------------- */

int ll_dev_count(void) { return (int)ggml_backend_dev_count(); }

static void ll_copy(char *dst, int len, const char *src) {
    if (dst == NULL || len <= 0) return;
    snprintf(dst, (size_t)len, "%s", src ? src : "");
}

int ll_dev_info(int i, char *name, int name_len, char *desc, int desc_len, int *type,
                size_t *mem_free, size_t *mem_total) {
    if (i < 0 || (size_t)i >= ggml_backend_dev_count()) return -1;
    ggml_backend_dev_t dev = ggml_backend_dev_get((size_t)i);
    ll_copy(name, name_len, ggml_backend_dev_name(dev));
    ll_copy(desc, desc_len, ggml_backend_dev_description(dev));
    size_t f = 0, t = 0;
    /* No memory pointers, no memory query: for an RPC device that is a network
     * round trip, and ggml aborts the process when the worker is gone. */
    if (mem_free || mem_total) ggml_backend_dev_memory(dev, &f, &t);
    if (type) *type = (int)ggml_backend_dev_type(dev);
    if (mem_free) *mem_free = f;
    if (mem_total) *mem_total = t;
    return 0;
}

int ll_dev_reg_name(int i, char *name, int name_len) {
    if (i < 0 || (size_t)i >= ggml_backend_dev_count()) return -1;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_dev_get((size_t)i));
    ll_copy(name, name_len, reg ? ggml_backend_reg_name(reg) : "");
    return 0;
}

int ll_dev_has_host_buffer(int i) {
    if (i < 0 || (size_t)i >= ggml_backend_dev_count()) return -1;
    return ggml_backend_dev_host_buffer_type(ggml_backend_dev_get((size_t)i)) != NULL;
}

/* ---- the CPU backend's extra buffer types --------------------------------- */

/* The list llama.cpp's make_cpu_buft_list walks (src/llama-model.cpp): asked of the
 * CPU registry by name, NULL-terminated, in the order llama.cpp tries them. */
static ggml_backend_buffer_type_t *ll_cpu_extra_bufts(ggml_backend_dev_t *cpu_out) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == NULL) return NULL;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    if (reg == NULL) return NULL;
    ggml_backend_dev_get_extra_bufts_t get = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (cpu_out) *cpu_out = cpu;
    return get ? get(cpu) : NULL;
}

int ll_cpu_extra_buft_count(void) {
    ggml_backend_buffer_type_t *b = ll_cpu_extra_bufts(NULL);
    int n = 0;
    while (b && b[n]) n++;
    return n;
}

int ll_cpu_extra_buft_name(int i, char *name, int name_len) {
    if (i < 0 || i >= ll_cpu_extra_buft_count()) return -1;
    ll_copy(name, name_len, ggml_backend_buft_name(ll_cpu_extra_bufts(NULL)[i]));
    return 0;
}

int ll_ggml_type_count(void) { return GGML_TYPE_COUNT; }

const char *ll_ggml_type_name(int type) {
    if (type < 0 || type >= GGML_TYPE_COUNT || ggml_blck_size((enum ggml_type)type) <= 0) return "";
    return ggml_type_name((enum ggml_type)type);
}

int ll_cpu_extra_buft_takes(int i, int type, int64_t k, int64_t rows, int64_t n_mat,
                            size_t *copy_size, size_t *size) {
    ggml_backend_dev_t cpu = NULL;
    if (i < 0 || i >= ll_cpu_extra_buft_count()) return -1;
    ggml_backend_buffer_type_t buft = ll_cpu_extra_bufts(&cpu)[i];
    if (type < 0 || type >= GGML_TYPE_COUNT || k <= 0 || rows <= 0 || n_mat <= 0) return -1;
    int64_t blck = ggml_blck_size((enum ggml_type)type);
    /* Removed types have no block; ggml asserts on a row that is not whole blocks. */
    if (blck <= 0 || ggml_type_size((enum ggml_type)type) == 0 || k % blck) return -1;
    struct ggml_init_params params = {ggml_tensor_overhead() * 8, NULL, true};
    struct ggml_context *ctx = ggml_init(params);
    if (ctx == NULL) return -1;
    /* The test llama.cpp's weight_buft_supported makes (src/llama-model-loader.cpp):
     * the op the weight serves, on a 512-token F32 batch, with the weight in an empty
     * buffer of this type, asked of the CPU device. */
    struct ggml_tensor *w, *op;
    const int64_t n_used = 2;
    if (n_mat > 1) {
        w = ggml_new_tensor_3d(ctx, (enum ggml_type)type, k, rows, n_mat);
        struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, n_used, 512);
        struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, 512);
        op = ggml_mul_mat_id(ctx, w, b, ids);
    } else {
        w = ggml_new_tensor_2d(ctx, (enum ggml_type)type, k, rows);
        struct ggml_tensor *b = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, k, 512, 1, 1);
        op = ggml_mul_mat(ctx, w, b);
    }
    w->buffer = ggml_backend_buft_alloc_buffer(buft, 0);
    int ok = w->buffer != NULL && ggml_backend_dev_supports_op(cpu, op);
    if (copy_size) *copy_size = ggml_backend_buft_get_alloc_size(buft, w);
    if (size) *size = ggml_nbytes(w);
    if (w->buffer) ggml_backend_buffer_free(w->buffer);
    w->buffer = NULL;
    ggml_free(ctx);
    return ok;
}

/* Weight types the self-test can make: ggml_quantize_chunk quantizes them from floats
 * with no importance matrix (the rest abort there, or need calibration data). */
static int ll_selftest_type(int type) {
    switch ((enum ggml_type)type) {
        case GGML_TYPE_F16: case GGML_TYPE_BF16:
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
        case GGML_TYPE_Q8_0: case GGML_TYPE_MXFP4:
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
            return !ggml_quantize_requires_imatrix((enum ggml_type)type);
        default:
            return 0;
    }
}

int ll_cpu_extra_buft_selftest(int i, int type, int64_t k, int64_t rows, int64_t m,
                               int n_threads, int rounds, double *err) {
    ggml_backend_dev_t cpu = NULL;
    if (err) *err = -1.0;
    if (m < 1 || m > 512 || n_threads < 1 || rounds < 1 || k > 16384 || rows > 16384) return -1;
    if (type < 0 || type >= GGML_TYPE_COUNT || !ll_selftest_type(type)) return -1;
    if (ll_cpu_extra_buft_takes(i, type, k, rows, 1, NULL, NULL) != 1) return -1;
    ggml_backend_buffer_type_t buft = ll_cpu_extra_bufts(&cpu)[i];
    enum ggml_type t = (enum ggml_type)type;
    int rc = -2;
    size_t wbytes = ggml_row_size(t, k) * (size_t)rows;
    float *w32 = malloc(sizeof(float) * (size_t)(k * rows));
    float *x32 = malloc(sizeof(float) * (size_t)(k * m));
    float *got = malloc(sizeof(float) * (size_t)(rows * m));
    float *want = malloc(sizeof(float) * (size_t)(rows * m));
    void *wq = malloc(wbytes);
    /* Three contexts: the weight in the buffer type under test; the same weight and the
     * input in the plain CPU buffer; the two products (the graph's own tensors). */
    struct ggml_init_params meta = {ggml_tensor_overhead() * 4, NULL, true};
    struct ggml_init_params graph = {ggml_tensor_overhead() * 4 + ggml_graph_overhead(), NULL,
                                     true};
    struct ggml_context *cw = ggml_init(meta), *cr = ggml_init(meta), *cg = ggml_init(graph);
    ggml_backend_buffer_t bw = NULL, br = NULL, bg = NULL;
    ggml_backend_t be = NULL;
    if (!w32 || !x32 || !got || !want || !wq || !cw || !cr || !cg) goto done;
    struct ggml_tensor *w = ggml_new_tensor_2d(cw, t, k, rows);
    struct ggml_tensor *w_ref = ggml_new_tensor_2d(cr, t, k, rows);
    struct ggml_tensor *x = ggml_new_tensor_2d(cr, GGML_TYPE_F32, k, m);
    struct ggml_tensor *y = ggml_mul_mat(cg, w, x);
    struct ggml_tensor *y_ref = ggml_mul_mat(cg, w_ref, x);
    struct ggml_cgraph *gf = ggml_new_graph(cg);
    ggml_build_forward_expand(gf, y);
    ggml_build_forward_expand(gf, y_ref);
    ggml_backend_buffer_type_t plain = ggml_backend_dev_buffer_type(cpu);
    bw = ggml_backend_alloc_ctx_tensors_from_buft(cw, buft);
    br = ggml_backend_alloc_ctx_tensors_from_buft(cr, plain);
    bg = ggml_backend_alloc_ctx_tensors_from_buft(cg, plain);
    be = ggml_backend_dev_init(cpu, NULL);
    if (!bw || !br || !bg || !be) goto done;
    /* Values from a fixed LCG in [-1, 1): the same test on every run and machine. */
    uint32_t s = 0x9e3779b9u;
    for (int64_t j = 0; j < k * rows; j++) {
        s = s * 1664525u + 1013904223u;
        w32[j] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
    }
    for (int64_t j = 0; j < k * m; j++) {
        s = s * 1664525u + 1013904223u;
        x32[j] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
    }
    ggml_quantize_chunk(t, w32, wq, 0, rows, k, NULL);
    /* Setting the weight in the extra buffer is where it repacks it. */
    ggml_backend_tensor_set(w, wq, 0, wbytes);
    ggml_backend_tensor_set(w_ref, wq, 0, wbytes);
    ggml_backend_tensor_set(x, x32, 0, sizeof(float) * (size_t)(k * m));
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    ggml_backend_set_n_threads_t set_threads = reg == NULL ? NULL : (ggml_backend_set_n_threads_t)
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    if (set_threads) set_threads(be, n_threads);
    /* Several rounds with a pause between: the same worker threads compute again after
     * the scheduler has run something else on their cores, as between decode steps (a
     * CPU that drops per-thread state, such as AMX's tile configuration, fails here). */
    for (int r = 0; r < rounds; r++) {
        if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) goto done;
        if (r + 1 < rounds) {
#if defined(_WIN32)
            Sleep(2);
#else
            struct timespec pause = {0, 2 * 1000 * 1000};
            nanosleep(&pause, NULL);
#endif
        }
    }
    ggml_backend_tensor_get(y, got, 0, sizeof(float) * (size_t)(rows * m));
    ggml_backend_tensor_get(y_ref, want, 0, sizeof(float) * (size_t)(rows * m));
    double scale = 0.0, diff = 0.0;
    for (int64_t j = 0; j < rows * m; j++) {
        double d = fabs((double)got[j] - (double)want[j]);
        if (!isfinite(got[j]) || !isfinite(d)) { diff = INFINITY; break; }
        if (fabs((double)want[j]) > scale) scale = fabs((double)want[j]);
        if (d > diff) diff = d;
    }
    double rel = diff / (scale > 1e-6 ? scale : 1e-6);
    if (err) *err = rel;
    /* Both products quantize the input alike, so they differ only in summation order:
     * far below 1% of the largest output.  A kernel that misreads its weights is off by
     * the outputs' own size. */
    rc = rel <= 1e-2;
done:
    if (be) ggml_backend_free(be);
    if (bg) ggml_backend_buffer_free(bg);
    if (br) ggml_backend_buffer_free(br);
    if (bw) ggml_backend_buffer_free(bw);
    if (cg) ggml_free(cg);
    if (cr) ggml_free(cr);
    if (cw) ggml_free(cw);
    free(wq); free(want); free(got); free(x32); free(w32);
    return rc;
}

int ll_cpu_extra_buft_drop(const char *name) {
    ggml_backend_buffer_type_t *b = ll_cpu_extra_bufts(NULL);
    if (b == NULL || name == NULL) return 0;
    int j = 0;
    while (b[j] && strcmp(ggml_backend_buft_name(b[j]), name) != 0) j++;
    if (b[j] == NULL) return 0;
    /* The list is the CPU backend's own NULL-terminated array (a static vector's storage
     * in ggml-cpu.cpp, handed out by pointer on every call), which llama.cpp's loader
     * (make_cpu_buft_list) and LoRA loader walk at each load: closing the gap there is
     * what takes the type out of both.  ggml's compute keeps its own list, where the
     * type only claims products whose weight lies in a buffer of that type, and no
     * weight is put there any more. */
    do {
        b[j] = b[j + 1];
        j++;
    } while (b[j - 1] != NULL);
    /* Asked afresh: a ggml that hands out a copy each time would still list it. */
    b = ll_cpu_extra_bufts(NULL);
    for (j = 0; b && b[j]; j++)
        if (strcmp(ggml_backend_buft_name(b[j]), name) == 0) return -1;
    return 1;
}

/* ---- crash hint ---------------------------------------------------------- */

#if defined(_WIN32)
/* No POSIX signals: the daemon's error says how the runner ended, without the hint. */
int ll_crash_hint(const char *text) { (void)text; return -1; }
#else
static char g_hint[512];
static size_t g_hint_len = 0;
static struct sigaction g_hint_prev[3];
static const int g_hint_signals[3] = {SIGILL, SIGSEGV, SIGBUS};

static void ll_hint_handler(int sig) {
    if (g_hint_len > 0) {
        ssize_t w = write(2, g_hint, g_hint_len);
        (void)w;
    }
    /* Put the previous action back and send the signal again: it is blocked until this
     * handler returns, then ends the process as it would have without us (a core dump,
     * faulthandler's traceback), whether a fault raised it or kill(2) sent it. */
    for (int i = 0; i < 3; i++)
        if (g_hint_signals[i] == sig) sigaction(sig, &g_hint_prev[i], NULL);
    raise(sig);
}

int ll_crash_hint(const char *text) {
    if (text == NULL || g_hint_len > 0) return g_hint_len > 0 ? 0 : -1;
    snprintf(g_hint, sizeof g_hint, "%s\n", text);
    g_hint_len = strlen(g_hint);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = ll_hint_handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++)
        if (sigaction(g_hint_signals[i], &sa, &g_hint_prev[i]) != 0) return -1;
    return 0;
}
#endif

/* ---- backend plugins and RPC --------------------------------------------- */

const char *ll_ggml_version(void) { return ggml_version(); }
const char *ll_ggml_commit(void) { return ggml_commit(); }

int ll_backend_load(const char *path, char *name, int name_len) {
    ggml_backend_reg_t reg = ggml_backend_load(path);
    if (reg == NULL) return -1;
    ll_copy(name, name_len, ggml_backend_reg_name(reg));
    return 0;
}

/* The RPC plugin's entry points, looked up by name: the shim does not link
 * libggml-rpc, which exists only once the user has built the plugin. */
static void *ll_rpc_proc(const char *proc) {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("RPC");
    return reg ? ggml_backend_reg_get_proc_address(reg, proc) : NULL;
}

typedef ggml_backend_reg_t (*ll_rpc_add_fn)(const char *);
typedef void (*ll_rpc_serve_fn)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *);

int ll_rpc_add_server(const char *endpoint) {
    ll_rpc_add_fn add = (ll_rpc_add_fn)ll_rpc_proc("ggml_backend_rpc_add_server");
    if (add == NULL) return -1;
    ggml_backend_reg_t reg = add(endpoint);
    if (reg == NULL) return -2;
    /* add_server returns the same registry for an endpoint it has seen; register once. */
    for (size_t i = 0; i < ggml_backend_reg_count(); i++) {
        if (ggml_backend_reg_get(i) == reg) return (int)ggml_backend_reg_dev_count(reg);
    }
    ggml_backend_register(reg);
    return (int)ggml_backend_reg_dev_count(reg);
}

int ll_rpc_start_server(const char *endpoint, const char *cache_dir, int n_threads,
                        const int *devs, int n_devs) {
    ll_rpc_serve_fn serve = (ll_rpc_serve_fn)ll_rpc_proc("ggml_backend_rpc_start_server");
    if (serve == NULL) return -1;
    if (devs == NULL || n_devs <= 0 || n_devs > 64) return -2;
    ggml_backend_dev_t list[64];
    for (int i = 0; i < n_devs; i++) {
        if (devs[i] < 0 || (size_t)devs[i] >= ggml_backend_dev_count()) return -2;
        list[i] = ggml_backend_dev_get((size_t)devs[i]);
    }
    /* The server reports with printf; line buffering shows it in a log as it happens. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    serve(endpoint, cache_dir, (size_t)(n_threads > 0 ? n_threads : 1), (size_t)n_devs, list);
    return 0;
}

/* ---- model --------------------------------------------------------------- */

#define LL_MAX_DEVS 64
#define LL_MAX_OVERRIDES 256

ll_model *ll_model_load(const char **paths, int n_paths, int n_gpu_layers, int main_gpu,
                        int use_mmap, int vocab_only, const int *devs, int n_devs,
                        int split_mode, const float *tensor_split, int n_split,
                        const char **cpu_patterns, int n_patterns, int use_extra_bufts) {
    if (paths == NULL || n_paths <= 0) return NULL;
    if (n_devs < 0 || n_devs >= LL_MAX_DEVS || n_patterns < 0 || n_patterns >= LL_MAX_OVERRIDES)
        return NULL;
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = n_gpu_layers;
    p.main_gpu = main_gpu;
    /* Always an explicit list (n_devs 0 = no offload device): llama.cpp's default of
     * "every device" would include RPC devices of workers this model does not use. */
    ggml_backend_dev_t dev_list[LL_MAX_DEVS + 1];
    for (int i = 0; i < n_devs; i++) {
        if (devs[i] < 0 || (size_t)devs[i] >= ggml_backend_dev_count()) return NULL;
        dev_list[i] = ggml_backend_dev_get((size_t)devs[i]);
    }
    dev_list[n_devs] = NULL;
    p.devices = dev_list;
    if (split_mode >= 0 && split_mode <= 2) p.split_mode = (enum llama_split_mode)split_mode;
    /* llama.cpp reads llama_max_devices() entries; unused ones stay 0. */
    float split[LL_MAX_DEVS] = {0};
    if (n_split > 0 && tensor_split != NULL) {
        size_t max = llama_max_devices();
        for (int i = 0; i < n_split && (size_t)i < max && i < LL_MAX_DEVS; i++)
            split[i] = tensor_split[i];
        p.tensor_split = split;
    }
    struct llama_model_tensor_buft_override overrides[LL_MAX_OVERRIDES + 1];
    if (n_patterns > 0) {
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (cpu == NULL) return NULL;
        ggml_backend_buffer_type_t host = ggml_backend_dev_buffer_type(cpu);
        for (int i = 0; i < n_patterns; i++) {
            overrides[i].pattern = cpu_patterns[i];
            overrides[i].buft = host;
        }
        overrides[n_patterns].pattern = NULL;
        overrides[n_patterns].buft = NULL;
        p.tensor_buft_overrides = overrides;
    }
    p.load_mode = (use_mmap && llama_supports_mmap()) ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    p.vocab_only = vocab_only != 0;
    p.use_extra_bufts = use_extra_bufts != 0;
    struct llama_model *model = n_paths == 1
        ? llama_model_load_from_file(paths[0], p)
        : llama_model_load_from_splits(paths, (size_t)n_paths, p);
    if (model == NULL) return NULL;
    ll_model *m = calloc(1, sizeof *m);
    if (m == NULL) { llama_model_free(model); return NULL; }
    m->model = model;
    m->vocab = llama_model_get_vocab(model);
    return m;
}

void ll_model_free(ll_model *m) {
    if (m == NULL) return;
    llama_model_free(m->model);
    free(m->nul_bias);
    free(m);
}

/* The -inf biases of the tokens a grammar must not pass (see struct ll_model): the
   unknown token, BOS (when it does not also end a generation), and any token whose
   text holds a NUL byte. */
static void scan_nul_tokens(ll_model *m) {
    if (m->nul_scanned) return;
    m->nul_scanned = 1;
    int32_t n = llama_vocab_n_tokens(m->vocab);
    llama_token bos = llama_vocab_bos(m->vocab);
    char buf[256];
    for (int32_t t = 0; t < n; t++) {
        int banned = (llama_vocab_get_attr(m->vocab, t) & LLAMA_TOKEN_ATTR_UNKNOWN) ||
                     (t == bos && !llama_vocab_is_eog(m->vocab, t));
        if (!banned) {
            int32_t len = llama_token_to_piece(m->vocab, t, buf, (int32_t)sizeof buf, 0, false);
            banned = len > 0 && len <= (int32_t)sizeof buf && memchr(buf, 0, (size_t)len) != NULL;
        }
        if (!banned) continue;
        llama_logit_bias *grown = realloc(m->nul_bias, (size_t)(m->n_nul + 1) * sizeof *grown);
        if (grown == NULL) return;
        m->nul_bias = grown;
        m->nul_bias[m->n_nul++] = (llama_logit_bias){t, -INFINITY};
    }
}

const char *ll_model_chat_template(const ll_model *m) {
    return llama_model_chat_template(m->model, NULL);
}
int ll_model_desc(const ll_model *m, char *buf, int len) {
    return llama_model_desc(m->model, buf, (size_t)len);
}
int ll_model_n_ctx_train(const ll_model *m) { return llama_model_n_ctx_train(m->model); }
int ll_model_n_layer(const ll_model *m) { return llama_model_n_layer(m->model); }
int ll_model_n_embd(const ll_model *m) { return llama_model_n_embd(m->model); }
int ll_model_n_vocab(const ll_model *m) { return llama_vocab_n_tokens(m->vocab); }

/* ---- vocab --------------------------------------------------------------- */

int32_t ll_token_bos(const ll_model *m) { return llama_vocab_bos(m->vocab); }
int32_t ll_token_eos(const ll_model *m) { return llama_vocab_eos(m->vocab); }
int ll_token_is_eog(const ll_model *m, int32_t t) { return llama_vocab_is_eog(m->vocab, t); }

int ll_tokenize(const ll_model *m, const char *text, int text_len, int32_t *tokens, int n_max,
                int add_special, int parse_special) {
    return llama_tokenize(m->vocab, text, text_len, tokens, n_max, add_special != 0,
                          parse_special != 0);
}

int ll_token_to_piece(const ll_model *m, int32_t token, char *buf, int len, int special) {
    return llama_token_to_piece(m->vocab, token, buf, len, 0, special != 0);
}

int ll_detokenize(const ll_model *m, const int32_t *tokens, int n, char *buf, int len,
                  int remove_special, int unparse_special) {
    return llama_detokenize(m->vocab, tokens, n, buf, len, remove_special != 0,
                            unparse_special != 0);
}

/* ---- context ------------------------------------------------------------- */

static enum ggml_type ll_kv_type(const char *s) {
    if (s == NULL || strcmp(s, "f16") == 0) return GGML_TYPE_F16;
    if (strcmp(s, "f32") == 0) return GGML_TYPE_F32;
    if (strcmp(s, "bf16") == 0) return GGML_TYPE_BF16;
    if (strcmp(s, "q8_0") == 0) return GGML_TYPE_Q8_0;
    if (strcmp(s, "q4_0") == 0) return GGML_TYPE_Q4_0;
    if (strcmp(s, "q4_1") == 0) return GGML_TYPE_Q4_1;
    if (strcmp(s, "q5_0") == 0) return GGML_TYPE_Q5_0;
    if (strcmp(s, "q5_1") == 0) return GGML_TYPE_Q5_1;
    return GGML_TYPE_COUNT;
}

/* The model's own pooling type, or -1 when its GGUF does not name one. */
static int ll_model_pooling(const ll_model *m) {
    char arch[64], key[128], val[32];
    if (llama_model_meta_val_str(m->model, "general.architecture", arch, sizeof arch) < 0) return -1;
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    if (llama_model_meta_val_str(m->model, key, val, sizeof val) < 0) return -1;
    return atoi(val);
}

ll_context *ll_context_new(ll_model *m, uint32_t n_ctx, uint32_t n_seq_max, uint32_t n_batch,
                           uint32_t n_ubatch, int n_threads, int n_threads_batch, int flash_attn,
                           const char *kv_type, int embeddings, int pooling, int kv_unified,
                           int device_sampling) {
    struct llama_context_params p = llama_context_default_params();
    enum ggml_type kv = ll_kv_type(kv_type);
    if (kv == GGML_TYPE_COUNT) return NULL;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max ? n_seq_max : 1;
    p.n_batch = n_batch;
    p.n_ubatch = n_ubatch;
    if (n_threads > 0) p.n_threads = n_threads;
    if (n_threads_batch > 0) p.n_threads_batch = n_threads_batch;
    p.flash_attn_type = (enum llama_flash_attn_type)flash_attn;
    p.type_k = kv;
    p.type_v = kv;
    p.embeddings = embeddings != 0;
    p.no_perf = true;
    p.kv_unified = kv_unified != 0;
    if (pooling == LL_POOLING_DEFAULT) {
        /* A generative GGUF usually names no pooling; embedding it means mean pooling. */
        if (embeddings && ll_model_pooling(m) < 0) p.pooling_type = LLAMA_POOLING_TYPE_MEAN;
        else p.pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED;
    } else {
        p.pooling_type = (enum llama_pooling_type)pooling;
    }
    struct llama_sampler *keeper = NULL;
    struct llama_sampler_seq_config keep = {0};
    if (device_sampling) {
        /* Any number of output rows per sequence (speculation verifies several), and
           a chain attached from the start to a sequence no batch uses: this load then
           plans the memory the sampling graph takes (a copy of the logits tensor), and
           it stays planned while slots attach and detach their chains. */
        p.n_outputs_max_per_seq = 0;
        keeper = keeper_new();
        if (keeper == NULL) return NULL;
        keep.seq_id = (llama_seq_id)p.n_seq_max;
        keep.sampler = keeper;
        p.samplers = &keep;
        p.n_samplers = 1;
    }
    struct llama_context *ctx = llama_init_from_model(m->model, p);
    ll_context *c = ctx != NULL ? calloc(1, sizeof *c) : NULL;
    if (c == NULL) {
        if (ctx != NULL) llama_free(ctx);
        if (keeper != NULL) llama_sampler_free(keeper);
        return NULL;
    }
    c->ctx = ctx;
    c->m = m;
    c->n_vocab = llama_vocab_n_tokens(m->vocab);
    c->keeper = keeper;
    return c;
}

void ll_context_free(ll_context *c) {
    if (c == NULL) return;
    llama_free(c->ctx);
    if (c->keeper != NULL) llama_sampler_free(c->keeper); /* after: the context points to it */
    free(c);
}

int ll_device_sampling(const ll_context *c) { return c->keeper != NULL; }

uint32_t ll_n_ctx(const ll_context *c) { return llama_n_ctx(c->ctx); }
int ll_pooling_type(const ll_context *c) { return (int)llama_pooling_type(c->ctx); }
void ll_set_embeddings(ll_context *c, int on) { llama_set_embeddings(c->ctx, on != 0); }
/* On a GPU llama_decode only queues the work; the wait comes with the first read
   of the outputs.  Waiting here instead costs nothing (every decode is read at
   once) and keeps that wait inside the time the engine charges to the step: else
   a prompt's (or an image's) GPU time would be counted as its first token's.
   Every decode of the shim goes through here. */
static int decode_and_wait(struct llama_context *ctx, struct llama_batch b) {
    int rc = llama_decode(ctx, b);
    if (rc == 0) llama_synchronize(ctx);
    return rc;
}

int ll_decode(ll_context *c, ll_batch *b) { return decode_and_wait(c->ctx, b->b); }

int ll_mem_seq_rm(ll_context *c, int32_t seq, int32_t p0, int32_t p1) {
    return llama_memory_seq_rm(llama_get_memory(c->ctx), seq, p0, p1);
}

void ll_mem_seq_cp(ll_context *c, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    llama_memory_seq_cp(llama_get_memory(c->ctx), src, dst, p0, p1);
}

void ll_mem_seq_add(ll_context *c, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    llama_memory_seq_add(llama_get_memory(c->ctx), seq, p0, p1, delta);
}

int ll_mem_can_shift(ll_context *c) { return llama_memory_can_shift(llama_get_memory(c->ctx)); }

size_t ll_state_seq_size(ll_context *c, int32_t seq) {
    return llama_state_seq_get_size(c->ctx, seq);
}

size_t ll_state_seq_get(ll_context *c, int32_t seq, uint8_t *dst, size_t size) {
    return llama_state_seq_get_data(c->ctx, dst, size, seq);
}

size_t ll_state_seq_set(ll_context *c, int32_t seq, const uint8_t *src, size_t size) {
    return llama_state_seq_set_data(c->ctx, src, size, seq);
}

int32_t ll_mem_seq_pos_min(ll_context *c, int32_t seq) {
    return llama_memory_seq_pos_min(llama_get_memory(c->ctx), seq);
}

int32_t ll_model_n_swa(const ll_model *m) { return llama_model_n_swa(m->model); }

float *ll_embeddings_seq(ll_context *c, int32_t seq) { return llama_get_embeddings_seq(c->ctx, seq); }
float *ll_embeddings_ith(ll_context *c, int32_t i) { return llama_get_embeddings_ith(c->ctx, i); }

/* The largest of x[0..n), NaNs skipped (-INFINITY when there is no number).  Four
   running maxima of four lanes each: a scan that carries one best index from
   element to element waits on each comparison, and on the GPU machine greedy
   sampling took more time than the model (275 us a row of 128k logits). */
static float max_value(const float *x, int32_t n) {
    float mx = -INFINITY;
    int32_t t = 0;
#if defined(__SSE2__)
    __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    for (; t + 16 <= n; t += 16) {
        /* MAXPS keeps its second operand when the first is NaN. */
        m0 = _mm_max_ps(_mm_loadu_ps(x + t), m0);
        m1 = _mm_max_ps(_mm_loadu_ps(x + t + 4), m1);
        m2 = _mm_max_ps(_mm_loadu_ps(x + t + 8), m2);
        m3 = _mm_max_ps(_mm_loadu_ps(x + t + 12), m3);
    }
    float lanes[4];
    _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
    for (int k = 0; k < 4; k++) mx = lanes[k] > mx ? lanes[k] : mx;
#endif
    for (; t < n; t++) mx = x[t] > mx ? x[t] : mx;
    return mx;
}

/* The first index of the largest value, as llama.cpp's greedy sampler picks it;
   0 when every value is NaN. */
static int32_t argmax_first(const float *x, int32_t n) {
    const float mx = max_value(x, n);
    int32_t t = 0;
#if defined(__SSE2__)
    const __m128 vm = _mm_set1_ps(mx);
    for (; t + 4 <= n; t += 4) {
        int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + t), vm));
        if (hit) return t + __builtin_ctz((unsigned)hit);
    }
#endif
    for (; t < n; t++)
        if (x[t] == mx) return t;
    return 0;
}

/* The n largest logits (n small: an insertion into a short best-first list), their
 * ids and values into ids/vals, best first.  Returns how many (n, or the vocab size). */
static int top_n(const float *lg, int32_t nv, int n, int32_t *ids, float *vals) {
    int k = 0;
    if (n > nv) n = nv;
    for (int32_t t = 0; t < nv && n > 0; t++) {
        float v = lg[t];
        if (k == n && v <= vals[k - 1]) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && vals[j - 1] < v) { vals[j] = vals[j - 1]; ids[j] = ids[j - 1]; j--; }
        vals[j] = v;
        ids[j] = t;
    }
    return k;
}

int ll_top_logprobs(ll_context *c, int32_t i, int32_t token, int n, int32_t *ids, float *lps,
                    float *token_lp) {
    const float *lg = llama_get_logits_ith(c->ctx, i);
    if (lg == NULL) return -1;
    const int32_t nv = c->n_vocab;
    const float mx = max_value(lg, nv);
    double sum = 0.0;
    for (int32_t t = 0; t < nv; t++) sum += exp((double)(lg[t] - mx));
    const float lse = mx + (float)log(sum);
    if (token_lp && token >= 0 && token < nv) *token_lp = lg[token] - lse;
    int k = top_n(lg, nv, n, ids, lps);
    for (int j = 0; j < k; j++) lps[j] -= lse;
    return k;
}

int32_t ll_greedy(ll_context *c, int32_t i, float *p_top) {
    const float *lg = llama_get_logits_ith(c->ctx, i);
    if (lg == NULL) return -1;
    /* As llama.cpp's own drafting: the probability among the 10 likeliest tokens
       (so draft_p_min means what llama-server's --spec-draft-p-min means), found
       in one pass instead of a softmax over the whole vocabulary. */
    enum { K = 10 };
    int32_t ids[K];
    float vals[K];
    int n = top_n(lg, c->n_vocab, K, ids, vals);
    if (n == 0) return -1;
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += exp((double)(vals[j] - vals[0]));
    if (p_top) *p_top = (float)(1.0 / sum);
    return ids[0];
}

/* ---- batch --------------------------------------------------------------- */

ll_batch *ll_batch_new(int n_tokens_max) {
    if (n_tokens_max <= 0) return NULL;
    ll_batch *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    b->b = llama_batch_init(n_tokens_max, 0, 1);
    b->cap = n_tokens_max;
    return b;
}

void ll_batch_free(ll_batch *b) {
    if (b == NULL) return;
    llama_batch_free(b->b);
    free(b);
}

void ll_batch_clear(ll_batch *b) { b->b.n_tokens = 0; }
int ll_batch_size(const ll_batch *b) { return b->b.n_tokens; }

int ll_batch_add(ll_batch *b, int32_t token, int32_t pos, int32_t seq, int logits) {
    int i = b->b.n_tokens;
    if (i >= b->cap) return -1;
    b->b.token[i] = token;
    b->b.pos[i] = pos;
    b->b.n_seq_id[i] = 1;
    b->b.seq_id[i][0] = seq;
    b->b.logits[i] = (int8_t)(logits != 0);
    b->b.n_tokens = i + 1;
    return i;
}

int ll_batch_add_seq(ll_batch *b, const int32_t *tokens, int n, int32_t pos0, int32_t seq,
                     int logits_last) {
    if (n <= 0 || b->b.n_tokens + n > b->cap) return -1;
    int last = -1;
    for (int k = 0; k < n; k++) {
        last = ll_batch_add(b, tokens[k], pos0 + k, seq, logits_last && k == n - 1);
    }
    return last;
}

/* ---- sampler chain -------------------------------------------------------- */

struct ll_sampler_extra {
    llama_logit_bias *bias;
    int32_t n_bias, cap_bias;
    float dry_multiplier, dry_base;
    int32_t dry_allowed_length, dry_penalty_last_n;
    char **breakers;
    int32_t n_breakers;
    float xtc_probability, xtc_threshold;
    float top_n_sigma;               /* <= 0: off */
    int32_t mirostat;                /* 0 off, 1 or 2 */
    float mirostat_tau, mirostat_eta;
};

ll_sampler_extra *ll_sampler_extra_new(void) { return calloc(1, sizeof(ll_sampler_extra)); }

void ll_sampler_extra_free(ll_sampler_extra *x) {
    if (x == NULL) return;
    for (int32_t k = 0; k < x->n_breakers; k++) free(x->breakers[k]);
    free(x->breakers);
    free(x->bias);
    free(x);
}

int ll_sampler_extra_bias(ll_sampler_extra *x, const int32_t *tokens, const float *biases,
                          int n) {
    if (n <= 0) return 0;
    if (x->n_bias + n > x->cap_bias) {
        int32_t cap = x->n_bias + n;
        llama_logit_bias *b = realloc(x->bias, sizeof *b * (size_t)cap);
        if (b == NULL) return -1;
        x->bias = b;
        x->cap_bias = cap;
    }
    for (int k = 0; k < n; k++) {
        x->bias[x->n_bias].token = tokens[k];
        x->bias[x->n_bias].bias = biases[k];
        x->n_bias++;
    }
    return 0;
}

int ll_sampler_extra_dry(ll_sampler_extra *x, float multiplier, float base,
                         int allowed_length, int penalty_last_n, const char **breakers,
                         int n_breakers) {
    char **copy = n_breakers > 0 ? calloc((size_t)n_breakers, sizeof *copy) : NULL;
    if (n_breakers > 0 && copy == NULL) return -1;
    for (int k = 0; k < n_breakers; k++) {
        size_t len = strlen(breakers[k]);
        copy[k] = malloc(len + 1);
        if (copy[k] == NULL) {
            for (int j = 0; j < k; j++) free(copy[j]);
            free(copy);
            return -1;
        }
        memcpy(copy[k], breakers[k], len + 1);
    }
    for (int32_t k = 0; k < x->n_breakers; k++) free(x->breakers[k]);
    free(x->breakers);
    x->breakers = copy;
    x->n_breakers = n_breakers;
    x->dry_multiplier = multiplier;
    x->dry_base = base;
    x->dry_allowed_length = allowed_length;
    x->dry_penalty_last_n = penalty_last_n;
    return 0;
}

void ll_sampler_extra_xtc(ll_sampler_extra *x, float probability, float threshold) {
    x->xtc_probability = probability;
    x->xtc_threshold = threshold;
}

void ll_sampler_extra_top_n_sigma(ll_sampler_extra *x, float n) { x->top_n_sigma = n; }

void ll_sampler_extra_mirostat(ll_sampler_extra *x, int version, float tau, float eta) {
    x->mirostat = version;
    x->mirostat_tau = tau;
    x->mirostat_eta = eta;
}

ll_sampler *ll_sampler_new(const ll_model *m, const ll_context *c, float temp, int top_k,
                           float top_p, float min_p, float typical_p, int penalty_last_n,
                           float penalty_repeat, float penalty_freq, float penalty_present,
                           uint32_t seed, const char *grammar) {
    return ll_sampler_new_ext(m, c, temp, top_k, top_p, min_p, typical_p, penalty_last_n,
                              penalty_repeat, penalty_freq, penalty_present, seed, grammar, NULL);
}

/* The steps before the truncation (llama.cpp's common chain order): logit bias,
   penalties, DRY.  Returns whether any was added. */
static int add_penalties(ll_sampler *s, const ll_model *m, const ll_context *c,
                         int penalty_last_n, float penalty_repeat, float penalty_freq,
                         float penalty_present, const ll_sampler_extra *x) {
    const int32_t n_vocab = llama_vocab_n_tokens(m->vocab);
    const int32_t n_ctx = c ? (int32_t)llama_n_ctx_seq(c->ctx) : 0;
    int added = 0;
    if (x->n_bias > 0) {
        llama_sampler_chain_add(s->chain, llama_sampler_init_logit_bias(n_vocab, x->n_bias, x->bias));
        added = 1;
    }
    if (penalty_last_n != 0 &&
        (penalty_repeat != 1.0f || penalty_freq != 0.0f || penalty_present != 0.0f)) {
        int last_n = penalty_last_n < 0 && c ? n_ctx : penalty_last_n;
        s->penalties = llama_sampler_init_penalties(n_vocab, last_n, penalty_repeat,
                                                    penalty_freq, penalty_present);
        llama_sampler_chain_add(s->chain, s->penalties);
        added = 1;
    }
    /* As llama.cpp's own test: DRY does something only with these. */
    if (x->dry_multiplier != 0.0f && x->dry_base >= 1.0f && x->dry_penalty_last_n != 0) {
        /* It allocates last_n ints: past the context it could only waste memory. */
        int last_n = x->dry_penalty_last_n < 0 || (c && x->dry_penalty_last_n > n_ctx)
                         ? n_ctx : x->dry_penalty_last_n;
        s->dry = llama_sampler_init_dry(m->vocab, x->dry_multiplier, x->dry_base,
                                        x->dry_allowed_length, last_n,
                                        (const char **)x->breakers, (size_t)x->n_breakers);
        llama_sampler_chain_add(s->chain, s->dry);
        added = 1;
    }
    return added;
}

ll_sampler *ll_sampler_new_ext(const ll_model *m, const ll_context *c, float temp, int top_k,
                               float top_p, float min_p, float typical_p, int penalty_last_n,
                               float penalty_repeat, float penalty_freq,
                               float penalty_present, uint32_t seed, const char *grammar,
                               const ll_sampler_extra *x) {
    static const ll_sampler_extra none;  /* all off */
    if (x == NULL) x = &none;
    ll_sampler *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = true;
    s->chain = llama_sampler_chain_init(cp);
    const int has_grammar = grammar != NULL && grammar[0] != '\0';
    if (has_grammar) {
        struct llama_sampler *g = llama_sampler_init_grammar(m->vocab, grammar, "root");
        if (g == NULL) { ll_sampler_free(s); return NULL; }
        scan_nul_tokens((ll_model *)m);  /* the model's one-time cache, hence the cast */
        if (m->n_nul > 0)
            llama_sampler_chain_add(s->chain, llama_sampler_init_logit_bias(
                llama_vocab_n_tokens(m->vocab), m->n_nul, m->nul_bias));
        llama_sampler_chain_add(s->chain, g);
    }
    /* plain: nothing runs before the truncation, so the short cuts below may skip it. */
    const int plain = !add_penalties(s, m, c, penalty_last_n, penalty_repeat, penalty_freq,
                                     penalty_present, x) && !has_grammar;
    /* XTC removes the likeliest tokens, so unlike the other cuts it can change a greedy pick. */
    const int xtc = x->xtc_probability > 0.0f && x->xtc_threshold <= 0.5f;
    if (temp <= 0.0f) {
        if (xtc) llama_sampler_chain_add(s->chain,
                     llama_sampler_init_xtc(x->xtc_probability, x->xtc_threshold, 1, seed));
        llama_sampler_chain_add(s->chain, llama_sampler_init_greedy());
        /* Greedy with nothing before it is a stateless argmax: skip building the
           vocabulary-sized candidate array the chain would fill for every token. */
        if (plain && !xtc) s->argmax_vocab = llama_vocab_n_tokens(m->vocab);
        return s;
    }
    if (x->mirostat == 1 || x->mirostat == 2) {
        llama_sampler_chain_add(s->chain, llama_sampler_init_temp(temp));
        llama_sampler_chain_add(s->chain, x->mirostat == 1
            ? llama_sampler_init_mirostat(llama_vocab_n_tokens(m->vocab), seed,
                                          x->mirostat_tau, x->mirostat_eta, 100)
            : llama_sampler_init_mirostat_v2(seed, x->mirostat_tau, x->mirostat_eta));
        return s;
    }
    const int sigma = x->top_n_sigma > 0.0f;
    if (sigma) llama_sampler_chain_add(s->chain, llama_sampler_init_top_n_sigma(x->top_n_sigma));
    if (top_k > 0) llama_sampler_chain_add(s->chain, llama_sampler_init_top_k(top_k));
    /* With nothing before top-k, the chain only ever sees the top_k likeliest tokens:
       hand it just those, found in one pass, instead of a vocabulary-sized array. */
    if (top_k > 0 && top_k <= 256 && plain && !sigma) {
        s->cand = malloc(sizeof *s->cand * (size_t)top_k);
        if (s->cand != NULL) {
            s->top_k = top_k;
            s->n_vocab = llama_vocab_n_tokens(m->vocab);
        }
    }
    if (typical_p > 0.0f && typical_p < 1.0f)
        llama_sampler_chain_add(s->chain, llama_sampler_init_typical(typical_p, 1));
    if (top_p > 0.0f && top_p < 1.0f)
        llama_sampler_chain_add(s->chain, llama_sampler_init_top_p(top_p, 1));
    if (min_p > 0.0f) llama_sampler_chain_add(s->chain, llama_sampler_init_min_p(min_p, 1));
    if (xtc) llama_sampler_chain_add(s->chain,
                 llama_sampler_init_xtc(x->xtc_probability, x->xtc_threshold, 1, seed));
    llama_sampler_chain_add(s->chain, llama_sampler_init_temp(temp));
    llama_sampler_chain_add(s->chain, llama_sampler_init_dist(seed));
    return s;
}

void ll_sampler_free(ll_sampler *s) {
    if (s == NULL) return;
    if (s->chain) llama_sampler_free(s->chain);
    free(s->cand);
    free(s);
}

void ll_sampler_accept_prompt(ll_sampler *s, const int32_t *tokens, int n) {
    for (int k = 0; k < n; k++) {
        if (s->penalties != NULL) llama_sampler_accept(s->penalties, tokens[k]);
        if (s->dry != NULL) llama_sampler_accept(s->dry, tokens[k]);
    }
}

int32_t ll_sampler_sample(ll_sampler *s, ll_context *c, int32_t i) {
    /* Attached: the decode drew the token (or, for a step the device cannot run, left
       the candidates it got to); this reads it and advances the chain's state. */
    if (s->on != NULL) return llama_sampler_sample(s->chain, c->ctx, i);
    if (s->argmax_vocab > 0) {
        const float *logits = llama_get_logits_ith(c->ctx, i);
        if (logits != NULL) return argmax_first(logits, s->argmax_vocab);
    }
    if (s->top_k > 0) {
        const float *lg = llama_get_logits_ith(c->ctx, i);
        if (lg != NULL) {
            llama_token_data *d = s->cand;
            int k = s->top_k, n = 0;
            for (int32_t t = 0; t < s->n_vocab; t++) {
                float v = lg[t];
                if (n == k && v <= d[k - 1].logit) continue;
                int j = n < k ? n++ : k - 1;
                while (j > 0 && d[j - 1].logit < v) { d[j] = d[j - 1]; j--; }
                d[j].id = t;
                d[j].logit = v;
                d[j].p = 0.0f;
            }
            llama_token_data_array cur = {d, (size_t)n, -1, false};
            llama_sampler_apply(s->chain, &cur);
            if (cur.selected >= 0 && cur.selected < (int64_t)cur.size) {
                llama_token tok = cur.data[cur.selected].id;
                llama_sampler_accept(s->chain, tok);
                return tok;
            }
        }
    }
    return llama_sampler_sample(s->chain, c->ctx, i);
}

/* ---- sampling on the device (llama.cpp's backend sampling) ------------------ */

/* Two steps of our own in device chains (llama_sampler_i's backend half).

   "ll-best-first" orders the candidates by logit, best first.  llama.cpp's top-k on a
   device returns its k tokens in no particular order (the CPU backend swaps the first
   two on purpose) where the host's leaves them best first, and dist draws by walking
   the cumulative probabilities in that order: without it one seed would draw other
   tokens on the device than on the host.  A chain with top-p needs none (top-p sorts).

   "ll-token-only" ends every device chain: it takes the chain's logits, probabilities
   and candidates out of the graph's outputs, so a decode copies one token id per row
   to the host instead of a vocabulary of floats (greedy leaves the raw logits as its
   "sampled logits") or three arrays of k.  Logprobs are never read from a device chain:
   a request that asks for them samples on the host. */

struct best_first { int32_t k; };

static const char *best_first_name(const struct llama_sampler *smpl) {
    (void)smpl;
    return "ll-best-first";
}

static int by_logit_desc(const void *a, const void *b) {
    const llama_token_data *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* On the host only when the device could not run the steps before it. */
static void best_first_apply(struct llama_sampler *smpl, llama_token_data_array *cur) {
    (void)smpl;
    if (cur->sorted) return;
    qsort(cur->data, cur->size, sizeof *cur->data, by_logit_desc);
    cur->sorted = true;
}

static struct llama_sampler *best_first_new(int32_t k);

static struct llama_sampler *best_first_clone(const struct llama_sampler *smpl) {
    return best_first_new(((const struct best_first *)smpl->ctx)->k);
}

static void best_first_free(struct llama_sampler *smpl) { free(smpl->ctx); }

/* A k-row tensor's rows in the given order, as a flat tensor. */
static struct ggml_tensor *rows_in(struct ggml_context *g, struct ggml_tensor *t,
                                   struct ggml_tensor *order) {
    const int64_t n = ggml_nelements(t);
    return ggml_reshape_1d(g, ggml_get_rows(g, ggml_reshape_2d(g, t, 1, n), order), n);
}

static bool best_first_backend_init(struct llama_sampler *smpl, ggml_backend_buffer_type_t buft,
                                    uint32_t n_outputs_max_per_seq) {
    (void)n_outputs_max_per_seq;
    ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
    if (dev == NULL) return true; /* as llama.cpp's own steps: the CPU runs every op */
    const int32_t k = ((struct best_first *)smpl->ctx)->k;
    struct ggml_init_params ip = {16 * ggml_tensor_overhead(), NULL, true};
    struct ggml_context *g = ggml_init(ip);
    if (g == NULL) return false;
    struct ggml_tensor *x = ggml_new_tensor_1d(g, GGML_TYPE_F32, k);
    struct ggml_tensor *ids = ggml_new_tensor_1d(g, GGML_TYPE_I32, k);
    struct ggml_tensor *order = ggml_argsort(g, x, GGML_SORT_ORDER_DESC);
    struct ggml_tensor *ops[3] = {order, ggml_get_rows(g, ggml_reshape_2d(g, x, 1, k), order),
                                  ggml_get_rows(g, ggml_reshape_2d(g, ids, 1, k), order)};
    bool ok = true;
    for (int j = 0; j < 3 && ok; j++) ok = ggml_backend_dev_supports_op(dev, ops[j]);
    ggml_free(g);
    return ok;
}

static void best_first_backend_apply(struct llama_sampler *smpl, struct ggml_context *g,
                                     struct ggml_cgraph *gf, struct llama_sampler_data *d) {
    (void)smpl;
    (void)gf;
    struct ggml_tensor *logits = ggml_reshape_1d(g, d->logits, ggml_nelements(d->logits));
    struct ggml_tensor *order = ggml_argsort(g, logits, GGML_SORT_ORDER_DESC);
    d->logits = rows_in(g, logits, order);
    d->candidates = d->candidates != NULL ? rows_in(g, d->candidates, order) : order;
}

static struct llama_sampler_i best_first_i = {
    .name = best_first_name,
    .apply = best_first_apply,
    .clone = best_first_clone,
    .free = best_first_free,
    .backend_init = best_first_backend_init,
    .backend_apply = best_first_backend_apply,
};

static struct llama_sampler *best_first_new(int32_t k) {
    struct best_first *b = malloc(sizeof *b);
    if (b == NULL) return NULL;
    b->k = k;
    return llama_sampler_init(&best_first_i, b);
}

static const char *token_only_name(const struct llama_sampler *smpl) {
    (void)smpl;
    return "ll-token-only";
}

static void token_only_apply(struct llama_sampler *smpl, llama_token_data_array *cur) {
    (void)smpl;
    (void)cur;
}

static bool token_only_backend_init(struct llama_sampler *smpl, ggml_backend_buffer_type_t buft,
                                    uint32_t n_outputs_max_per_seq) {
    (void)smpl;
    (void)buft;
    (void)n_outputs_max_per_seq;
    return true;
}

static void token_only_backend_apply(struct llama_sampler *smpl, struct ggml_context *g,
                                     struct ggml_cgraph *gf, struct llama_sampler_data *d) {
    (void)smpl;
    (void)g;
    (void)gf;
    if (d->sampled == NULL) return; /* nothing drew a token: the host needs the rest */
    d->logits = NULL;
    d->probs = NULL;
    d->candidates = NULL;
}

static struct llama_sampler_i token_only_i = {
    .name = token_only_name,
    .apply = token_only_apply,
    .backend_init = token_only_backend_init,
    .backend_apply = token_only_backend_apply,
};

ll_sampler *ll_sampler_new_device(const ll_model *m, float temp, int top_k, float top_p,
                                  float min_p, uint32_t seed) {
    ll_sampler *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = true;
    s->chain = llama_sampler_chain_init(cp);
    if (temp <= 0.0f) {
        llama_sampler_chain_add(s->chain, llama_sampler_init_greedy());
    } else {
        /* The host chain of ll_sampler_new, in its order, without the steps that have
           no device form (grammar, penalties, typical-p: those requests stay on the host). */
        const int32_t n_vocab = llama_vocab_n_tokens(m->vocab);
        const int sorting = top_p > 0.0f && top_p < 1.0f;
        if (top_k > 0) {
            const int32_t k = top_k < n_vocab ? top_k : n_vocab; /* as the host's top-k */
            llama_sampler_chain_add(s->chain, llama_sampler_init_top_k(k));
            struct llama_sampler *b = sorting ? NULL : best_first_new(k);
            if (!sorting && b == NULL) { ll_sampler_free(s); return NULL; }
            if (b != NULL) llama_sampler_chain_add(s->chain, b);
        }
        if (sorting) llama_sampler_chain_add(s->chain, llama_sampler_init_top_p(top_p, 1));
        if (min_p > 0.0f) llama_sampler_chain_add(s->chain, llama_sampler_init_min_p(min_p, 1));
        llama_sampler_chain_add(s->chain, llama_sampler_init_temp(temp));
        llama_sampler_chain_add(s->chain, llama_sampler_init_dist(seed));
    }
    llama_sampler_chain_add(s->chain, llama_sampler_init(&token_only_i, NULL));
    return s;
}

/* Greedy, but never active: its sequence has no rows. */
static struct llama_sampler *keeper_new(void) {
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = true;
    struct llama_sampler *k = llama_sampler_chain_init(cp);
    if (k == NULL) return NULL;
    llama_sampler_chain_add(k, llama_sampler_init_greedy());
    llama_sampler_chain_add(k, llama_sampler_init(&token_only_i, NULL));
    return k;
}

int ll_sampler_attach(ll_sampler *s, ll_context *c, int32_t seq) {
    if (s->on != NULL || !llama_set_sampler(c->ctx, seq, s->chain)) return 0;
    s->on = c->ctx;
    s->seq = seq;
    return 1;
}

void ll_sampler_detach(ll_sampler *s) {
    if (s->on == NULL) return;
    llama_set_sampler(s->on, s->seq, NULL);
    s->on = NULL;
}

void ll_sampler_reset(ll_sampler *s) { llama_sampler_reset(s->chain); }

/* ---- LoRA ------------------------------------------------------------------ */

ll_lora *ll_lora_load(ll_model *m, const char *path) {
    struct llama_adapter_lora *a = llama_adapter_lora_init(m->model, path);
    if (a == NULL) return NULL;
    ll_lora *l = calloc(1, sizeof *l);
    if (l == NULL) { llama_adapter_lora_free(a); return NULL; }
    l->adapter = a;
    return l;
}

void ll_lora_free(ll_lora *a) {
    if (a == NULL) return;
    llama_adapter_lora_free(a->adapter);
    free(a);
}

int ll_lora_apply(ll_context *c, ll_lora **adapters, float *scales, int n) {
    struct llama_adapter_lora *raw[64];
    if (n < 0 || n > 64) return -1;
    for (int k = 0; k < n; k++) raw[k] = adapters[k]->adapter;
    return llama_set_adapters_lora(c->ctx, n ? raw : NULL, (size_t)n, n ? scales : NULL);
}

/* ---- quantize -------------------------------------------------------------- */

static const struct { const char *name; enum llama_ftype ftype; } LL_FTYPES[] = {
    {"F32", LLAMA_FTYPE_ALL_F32},         {"F16", LLAMA_FTYPE_MOSTLY_F16},
    {"BF16", LLAMA_FTYPE_MOSTLY_BF16},    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},    {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
    {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},    {"Q2_K_S", LLAMA_FTYPE_MOSTLY_Q2_K_S},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S}, {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L}, {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
    {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
    {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
};

int ll_ftype_from_name(const char *name) {
    if (name == NULL) return -1;
    for (size_t k = 0; k < sizeof LL_FTYPES / sizeof LL_FTYPES[0]; k++) {
        const char *a = LL_FTYPES[k].name, *b = name;
        while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b)) { a++; b++; }
        if (*a == '\0' && *b == '\0') return (int)LL_FTYPES[k].ftype;
    }
    return -1;
}

int ll_quantize(const char *in_path, const char *out_path, int ftype, int nthread) {
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype)ftype;
    p.nthread = nthread;
    return (int)llama_model_quantize(in_path, out_path, &p);
}

/* ---- multimodal projector (libmtmd) ---------------------------------------- */

struct ll_mtmd {
    mtmd_context *ctx;
    int n_embd;
};

const char *ll_mtmd_default_marker(void) { return mtmd_default_marker(); }

ll_mtmd *ll_mtmd_load(const char *path, const ll_model *m, int use_gpu, int dev, int n_threads,
                      int flash_attn, int warmup) {
    struct mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = use_gpu != 0;
    if (use_gpu && dev >= 0 && (size_t)dev < ggml_backend_dev_count())
        p.device = ggml_backend_dev_get((size_t)dev);
    p.print_timings = false;
    if (n_threads > 0) p.n_threads = n_threads;
    p.flash_attn_type = (enum llama_flash_attn_type)flash_attn;
    p.warmup = warmup != 0;
    mtmd_context *ctx = mtmd_init_from_file(path, m->model, p);
    if (ctx == NULL) return NULL;
    ll_mtmd *x = calloc(1, sizeof *x);
    if (x == NULL) { mtmd_free(ctx); return NULL; }
    x->ctx = ctx;
    x->n_embd = llama_model_n_embd_inp(m->model);
    return x;
}

void ll_mtmd_free(ll_mtmd *x) {
    if (x == NULL) return;
    mtmd_free(x->ctx);
    free(x);
}

int ll_mtmd_supports_vision(const ll_mtmd *x) { return mtmd_support_vision(x->ctx); }
int ll_mtmd_uses_mrope(const ll_mtmd *x) { return mtmd_decode_use_mrope(x->ctx); }
int ll_mtmd_non_causal(const ll_mtmd *x) { return mtmd_decode_use_non_causal(x->ctx, NULL); }
int ll_mtmd_n_embd(const ll_mtmd *x) { return x->n_embd; }

#define LL_MAX_MEDIA 256

/* A tokenized prompt: its chunks in prompt order (at[0..n)), pointing into the chunk
 * lists of the tokenize passes that made them (owned, see ll_mtmd_tokenize). */
struct ll_chunks {
    mtmd_input_chunks **lists;
    int n_lists;
    const mtmd_input_chunk **at;
    size_t n;
};

void ll_chunks_free(ll_chunks *c) {
    if (c == NULL) return;
    for (int k = 0; k < c->n_lists; k++) mtmd_input_chunks_free(c->lists[k]);
    free(c->lists);
    free((void *)c->at);
    free(c);
}

/* One encoded image file decoded (stb_image, through libmtmd's helper, which sets the
 * bitmap's id to the file's sha256: what KV-cache reuse keys on).  NULL with *err set
 * when it is not an image. */
static mtmd_bitmap *ll_decode_image(ll_mtmd *x, const unsigned char *buf, size_t len,
                                    int *err) {
    struct mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_buf(
        x->ctx, buf, len, false, mtmd_helper_init_opt_default());
    if (w.video_ctx != NULL) {
        /* A video (only with libmtmd's video support): its lazy bitmap reads frames
         * through the video context, so both go together, and it is not an image. */
        if (w.bitmap != NULL) mtmd_bitmap_free(w.bitmap);
        mtmd_helper_video_free(w.video_ctx);
        *err = LL_MEDIA_DECODE;
        return NULL;
    }
    if (w.bitmap == NULL) { *err = LL_MEDIA_DECODE; return NULL; }
    if (mtmd_bitmap_is_audio(w.bitmap)) {
        mtmd_bitmap_free(w.bitmap);
        *err = LL_MEDIA_AUDIO;
        return NULL;
    }
    return w.bitmap;
}

static int32_t ll_tokenize_pass(ll_mtmd *x, const char *text, size_t len, int add_special,
                                int parse_special, mtmd_bitmap **bitmaps, size_t n,
                                mtmd_input_chunks **out) {
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    if (chunks == NULL) return 2;
    struct mtmd_input_text t = {text, len, add_special != 0, parse_special != 0};
    int32_t rc = mtmd_tokenize(x->ctx, chunks, &t, (const mtmd_bitmap *const *)bitmaps, n);
    if (rc != 0) { mtmd_input_chunks_free(chunks); return rc; }
    *out = chunks;
    return 0;
}

/* Where each media marker of text ends, left to right as libmtmd splits the text;
 * 0 when there are exactly n of them. */
static int ll_marker_ends(const char *text, const char *marker, size_t *ends, int n) {
    size_t ml = strlen(marker);
    int k = 0;
    for (const char *p = strstr(text, marker); p != NULL; p = strstr(p, marker)) {
        if (k == n) return -1;
        p += ml;
        ends[k++] = (size_t)(p - text);
    }
    return k == n ? 0 : -1;
}

static int ll_is_real_media(const mtmd_input_chunk *ch) {
    if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) return 0;
    const char *id = mtmd_input_chunk_get_id(ch);
    return id != NULL && id[0] != '\0';
}

/* The next real image chunk of lists[*pass..last) from position *pos, or NULL. */
static const mtmd_input_chunk *ll_next_real(const ll_chunks *c, int last, int *pass,
                                            size_t *pos) {
    for (; *pass < last; (*pass)++, *pos = 0) {
        const mtmd_input_chunks *l = c->lists[*pass];
        while (*pos < mtmd_input_chunks_size(l)) {
            const mtmd_input_chunk *ch = mtmd_input_chunks_get(l, (*pos)++);
            if (ll_is_real_media(ch)) return ch;
        }
    }
    return NULL;
}

/* Put the chunks in prompt order.  The last pass holds every chunk in its place, the
 * images before its own as placeholders (no id); each placeholder takes the next real
 * chunk of the earlier passes, which must match it in kind, tokens and positions (it
 * was made from an image of the same size at the same place).  -1 when they do not. */
static int ll_chunks_order(ll_chunks *c) {
    const int last = c->n_lists - 1;
    const mtmd_input_chunks *whole = c->lists[last];
    size_t n = mtmd_input_chunks_size(whole);
    c->at = malloc((n ? n : 1) * sizeof *c->at);
    if (c->at == NULL) return -1;
    int pass = 0;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const mtmd_input_chunk *ch = mtmd_input_chunks_get(whole, i);
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT
                || ll_is_real_media(ch)) {
            c->at[i] = ch;
            continue;
        }
        const mtmd_input_chunk *real = ll_next_real(c, last, &pass, &pos);
        if (real == NULL || mtmd_input_chunk_get_type(real) != mtmd_input_chunk_get_type(ch)
                || mtmd_input_chunk_get_n_tokens(real) != mtmd_input_chunk_get_n_tokens(ch)
                || mtmd_input_chunk_get_n_pos(real) != mtmd_input_chunk_get_n_pos(ch))
            return -1;
        c->at[i] = real;
    }
    if (ll_next_real(c, last, &pass, &pos) != NULL) return -1;  /* one left over */
    c->n = n;
    return 0;
}

/* libmtmd's own way: every image decoded, then one tokenization.  Only when the image
 * by image passes could not be matched up (a preprocessor that sizes a placeholder
 * differently from its image); the daemon's pixel cap per request bounds it. */
static ll_chunks *ll_tokenize_at_once(ll_mtmd *x, const char *text, int add_special,
                                      int parse_special, const unsigned char **bufs,
                                      const size_t *lens, int n, int *err, int *bad,
                                      int suspect) {
    *err = LL_MEDIA_OK;
    *bad = -1;
    if (n < 0 || n > LL_MAX_MEDIA) { *err = LL_MEDIA_COUNT; return NULL; }
    mtmd_bitmap *bitmaps[LL_MAX_MEDIA];
    int made = 0;
    ll_chunks *out = calloc(1, sizeof *out);
    if (out == NULL || (out->lists = calloc(1, sizeof *out->lists)) == NULL) {
        *err = LL_MEDIA_PREPROC;
        goto fail;
    }
    for (; made < n; made++) {
        bitmaps[made] = ll_decode_image(x, bufs[made], lens[made], err);
        if (bitmaps[made] == NULL) { *bad = made; goto fail; }
    }
    int32_t rc = ll_tokenize_pass(x, text, strlen(text), add_special, parse_special, bitmaps,
                                  (size_t)n, &out->lists[0]);
    if (rc != 0) {
        *err = rc == 1 ? LL_MEDIA_COUNT : LL_MEDIA_PREPROC;
        *bad = rc == 1 ? -1 : suspect; /* the image whose own pass failed, if one did */
        goto fail;
    }
    out->n_lists = 1;
    if (ll_chunks_order(out) != 0) { *err = LL_MEDIA_PREPROC; goto fail; }
    for (int k = 0; k < made; k++) mtmd_bitmap_free(bitmaps[k]);
    return out;
fail:
    for (int k = 0; k < made; k++) mtmd_bitmap_free(bitmaps[k]);
    ll_chunks_free(out);
    return NULL;
}

/* Outcomes of ll_by_image besides success. */
enum { LL_PASS_FAILED = 1, LL_PASS_MISMATCH = 2, LL_PASS_REFUSED = 3 };

/* The image by image tokenization (see ll_mtmd_tokenize).  Pass k (before the last)
 * tokenizes the text up to image k's marker with image k decoded and placeholders (its
 * sizes, no pixels) for the images before it.  whole = 0: of that text, only image k's
 * own segment (from the marker before it), with the earlier placeholders' markers
 * before it, so the text is tokenized about twice in all rather than once per image;
 * whole = 1: all of it, for a projector whose image chunks depend on the tokens before
 * them (DeepSeek-V4 pads an image to its place; ll_chunks_order sees the other size).
 * NULL with *how = LL_PASS_FAILED (*err and *bad set), LL_PASS_MISMATCH (the chunks
 * did not match up) or LL_PASS_REFUSED (libmtmd refused image *bad with placeholders
 * beside it). */
static ll_chunks *ll_by_image(ll_mtmd *x, const char *text, const size_t *ends,
                              int add_special, int parse_special, const unsigned char **bufs,
                              const size_t *lens, int n, int whole, int *err, int *bad,
                              int *how) {
    const int passes = n > 0 ? n : 1;
    const char *marker = mtmd_get_marker(x->ctx);
    const size_t ml = strlen(marker);
    mtmd_bitmap *bitmaps[LL_MAX_MEDIA];
    int held = 0; /* bitmaps[0..held) are placeholders */
    char *own = NULL;
    *how = LL_PASS_FAILED;
    ll_chunks *out = calloc(1, sizeof *out);
    if (out == NULL || (out->lists = calloc((size_t)passes, sizeof *out->lists)) == NULL) {
        *err = LL_MEDIA_PREPROC;
        goto fail;
    }
    for (int k = 0; k < passes; k++) {
        const char *t = text;
        size_t len = k == passes - 1 ? strlen(text) : ends[k];
        if (!whole && k > 0 && k < passes - 1) {
            size_t seg = ends[k] - ends[k - 1];
            free(own);
            own = malloc((size_t)k * ml + seg);
            if (own == NULL) { *err = LL_MEDIA_PREPROC; goto fail; }
            for (int j = 0; j < k; j++) memcpy(own + (size_t)j * ml, marker, ml);
            memcpy(own + (size_t)k * ml, text + ends[k - 1], seg);
            t = own;
            len = (size_t)k * ml + seg;
        }
        mtmd_bitmap *real = NULL;
        if (n > 0) {
            real = ll_decode_image(x, bufs[k], lens[k], err);
            if (real == NULL) { *bad = k; goto fail; }
            bitmaps[k] = real;
        }
        int32_t rc = ll_tokenize_pass(x, t, len, add_special, parse_special, bitmaps,
                                      (size_t)(n > 0 ? k + 1 : 0), &out->lists[k]);
        if (real != NULL) {
            /* The pixels go now; a placeholder stands in for them in later passes. */
            bitmaps[k] = mtmd_bitmap_init(mtmd_bitmap_get_nx(real), mtmd_bitmap_get_ny(real),
                                          NULL);
            mtmd_bitmap_free(real);
            if (bitmaps[k] == NULL) { *err = LL_MEDIA_PREPROC; goto fail; }
            held = k + 1;
        }
        if (rc != 0) {
            *err = rc == 1 ? LL_MEDIA_COUNT : LL_MEDIA_PREPROC;
            *bad = rc == 1 ? -1 : k;
            /* With no placeholder beside it, image k itself is what libmtmd refused. */
            if (rc != 1 && k > 0) *how = LL_PASS_REFUSED;
            goto fail;
        }
        out->n_lists = k + 1;
    }
    if (ll_chunks_order(out) != 0) { *how = LL_PASS_MISMATCH; goto fail; }
    for (int k = 0; k < held; k++) mtmd_bitmap_free(bitmaps[k]);
    free(own);
    return out;
fail:
    for (int k = 0; k < held; k++) mtmd_bitmap_free(bitmaps[k]);
    free(own);
    ll_chunks_free(out);
    return NULL;
}

ll_chunks *ll_mtmd_tokenize(ll_mtmd *x, const char *text, int add_special, int parse_special,
                            const unsigned char **bufs, const size_t *lens, int n, int *err,
                            int *bad) {
    *err = LL_MEDIA_OK;
    *bad = -1;
    if (n < 0 || n > LL_MAX_MEDIA) { *err = LL_MEDIA_COUNT; return NULL; }
    size_t ends[LL_MAX_MEDIA];
    if (ll_marker_ends(text, mtmd_get_marker(x->ctx), ends, n) != 0) {
        *err = LL_MEDIA_COUNT;
        return NULL;
    }
    /* One image decoded at a time, so the peak is one decoded bitmap (plus libmtmd's
     * copy of it), not all of them; each pass is a whole libmtmd tokenization up to its
     * image, so the chunks it makes for that image are those one tokenization of
     * everything makes (slices, image index), and the last pass, over the whole text,
     * gives the prompt's order (ll_chunks_order).  Should the chunks not match up,
     * the passes take the whole text before each image, then libmtmd's own way. */
    int how = 0;
    for (int whole = 0; whole <= 1; whole++) {
        ll_chunks *out = ll_by_image(x, text, ends, add_special, parse_special, bufs, lens, n,
                                     whole, err, bad, &how);
        if (out != NULL || how == LL_PASS_FAILED) return out;
        if (how == LL_PASS_REFUSED) break;
    }
    int suspect = how == LL_PASS_REFUSED ? *bad : -1;
    return ll_tokenize_at_once(x, text, add_special, parse_special, bufs, lens, n, err, bad,
                               suspect);
}

ll_chunks *ll_mtmd_tokenize_at_once(ll_mtmd *x, const char *text, int add_special,
                                    int parse_special, const unsigned char **bufs,
                                    const size_t *lens, int n, int *err, int *bad) {
    return ll_tokenize_at_once(x, text, add_special, parse_special, bufs, lens, n, err, bad,
                               -1);
}

int ll_chunks_count(const ll_chunks *c) { return (int)c->n; }

static const mtmd_input_chunk *ll_chunk_at(const ll_chunks *c, int i) {
    return i < 0 || (size_t)i >= c->n ? NULL : c->at[i];
}

int ll_chunk_info(const ll_chunks *c, int i, int *type, int *n_tokens, int *n_pos, char *id,
                  int id_len) {
    const mtmd_input_chunk *ch = ll_chunk_at(c, i);
    if (ch == NULL) return -1;
    *type = (int)mtmd_input_chunk_get_type(ch);
    *n_tokens = (int)mtmd_input_chunk_get_n_tokens(ch);
    *n_pos = (int)mtmd_input_chunk_get_n_pos(ch);
    ll_copy(id, id_len, mtmd_input_chunk_get_id(ch));
    return 0;
}

int ll_chunk_text_tokens(const ll_chunks *c, int i, int32_t *out, int cap) {
    const mtmd_input_chunk *ch = ll_chunk_at(c, i);
    if (ch == NULL) return -1;
    size_t n = 0;
    const llama_token *toks = mtmd_input_chunk_get_tokens_text(ch, &n);
    if (toks == NULL) return 0;
    for (size_t k = 0; k < n && (int)k < cap; k++) out[k] = toks[k];
    return (int)n;
}

int ll_mtmd_encode(ll_mtmd *x, const ll_chunks *c, int i, float *out, size_t cap) {
    const mtmd_input_chunk *ch = ll_chunk_at(c, i);
    if (ch == NULL || mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) return -1;
    size_t need = mtmd_input_chunk_get_n_tokens(ch) * (size_t)x->n_embd;
    if (need > cap) return -1;
    int32_t rc = mtmd_encode_chunk(x->ctx, ch);
    if (rc != 0) return rc;
    const float *embd = mtmd_get_output_embd(x->ctx);
    if (embd == NULL) return -1;
    memcpy(out, embd, need * sizeof(float));
    return 0;
}

int ll_model_n_pos_per_embd(const ll_model *m) {
    enum llama_rope_type r = llama_model_rope_type(m->model);
    return (r == LLAMA_ROPE_TYPE_MROPE || r == LLAMA_ROPE_TYPE_IMROPE) ? 4 : 1;
}

int ll_chunk_image_pos(const ll_chunks *c, int i, int32_t pos0, int32_t *out, int cap) {
    const mtmd_input_chunk *ch = ll_chunk_at(c, i);
    const mtmd_image_tokens *img = ch != NULL ? mtmd_input_chunk_get_tokens_image(ch) : NULL;
    if (img == NULL) return -1;
    size_t n = mtmd_image_tokens_get_n_tokens(img);
    if (n * 4 > (size_t)cap) return -1;
    for (size_t k = 0; k < n; k++) {
        /* libmtmd knows the layout (Qwen's grid, HunyuanVL's rows); the sections are
         * t, y, x, z in that order, as llama.cpp's M-RoPE reads them. */
        struct mtmd_decoder_pos p = mtmd_image_tokens_get_decoder_pos(img, pos0, k);
        out[4 * k] = (int32_t)p.t;
        out[4 * k + 1] = (int32_t)p.y;
        out[4 * k + 2] = (int32_t)p.x;
        out[4 * k + 3] = (int32_t)p.z;
    }
    return (int)n;
}

int32_t ll_mem_seq_pos_max(ll_context *c, int32_t seq) {
    return llama_memory_seq_pos_max(llama_get_memory(c->ctx), seq);
}

int ll_mtmd_eval_chunks(ll_mtmd *x, ll_context *c, const ll_chunks *ch, int32_t seq,
                        int n_batch, int32_t *n_past) {
    /* What mtmd_helper_eval_chunks does over one chunk list, over the prompt's order. */
    llama_pos next = *n_past;
    for (size_t i = 0; i < ch->n; i++) {
        int32_t rc = mtmd_helper_eval_chunk_single(x->ctx, c->ctx, ch->at[i], next, seq,
                                                   n_batch, i + 1 == ch->n, &next);
        if (rc != 0) return rc;
        *n_past = next;
    }
    return 0;
}

int ll_decode_embd(ll_context *c, const float *embd, int n, int n_embd, int32_t pos0,
                   const int32_t *pos4, int32_t seq, int logits_last, int non_causal) {
    if (n <= 0 || embd == NULL || n_embd != llama_model_n_embd_inp(c->m->model)) return -1;
    /* An embeddings batch carries n_sect positions per row, section-major (all rows'
     * first component, then all second ...): what llama.cpp reads for M-RoPE. */
    const int n_sect = ll_model_n_pos_per_embd(c->m);
    /* A batch over the caller's rows (no copy); only the small per-token arrays are ours. */
    llama_pos *pos = malloc((size_t)n * (size_t)n_sect * sizeof *pos);
    int32_t *n_seq = malloc((size_t)n * sizeof *n_seq);
    llama_seq_id *seq_one = malloc((size_t)n * sizeof *seq_one);
    llama_seq_id **seq_ids = malloc((size_t)n * sizeof *seq_ids);
    int8_t *logits = malloc((size_t)n * sizeof *logits);
    int rc = -1;
    if (pos && n_seq && seq_one && seq_ids && logits) {
        for (int k = 0; k < n; k++) {
            for (int j = 0; j < n_sect; j++)
                pos[(size_t)j * n + k] = pos4 != NULL ? pos4[4 * k + (n_sect == 4 ? j : 0)]
                                                      : pos0 + k;
            n_seq[k] = 1;
            seq_one[k] = seq;
            seq_ids[k] = &seq_one[k];
            logits[k] = (int8_t)(logits_last && k == n - 1);
        }
        struct llama_batch b = {0};
        b.n_tokens = n;
        b.embd = (float *)embd;
        b.pos = pos;
        b.n_seq_id = n_seq;
        b.seq_id = seq_ids;
        b.logits = logits;
        if (non_causal) llama_set_causal_attn(c->ctx, false);
        rc = decode_and_wait(c->ctx, b);
        if (non_causal) llama_set_causal_attn(c->ctx, true);
    }
    free(pos); free(n_seq); free(seq_one); free(seq_ids); free(logits);
    return rc;
}
