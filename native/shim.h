/* localllm native shim: the narrow C API that Python sees over llama.h.
 *
 * Why a shim: llama.h passes llama_model_params, llama_context_params and
 * llama_batch by value and changes their layouts between releases.  Here
 * those structs are filled in C (compiled against the real header), and
 * Python only ever sees opaque handles, scalars and pointers.
 *
 * This file is also the cffi cdef (native/build_ffi.py reads it), so it must
 * stay plain declarations that cffi can parse: no #include, no macros other
 * than integer #defines, no struct bodies.
 */

#define LL_FLASH_AUTO -1
#define LL_FLASH_OFF 0
#define LL_FLASH_ON 1

#define LL_POOLING_DEFAULT -1
#define LL_POOLING_NONE 0
#define LL_POOLING_MEAN 1
#define LL_POOLING_CLS 2
#define LL_POOLING_LAST 3

typedef struct ll_model ll_model;
typedef struct ll_context ll_context;
typedef struct ll_batch ll_batch;
typedef struct ll_sampler ll_sampler;
typedef struct ll_sampler_extra ll_sampler_extra;
typedef struct ll_lora ll_lora;

/* ---- build and system ---------------------------------------------------- */
void ll_backend_init(const char *backend_dir);
int ll_has_cpu_backend(void);
const char *ll_system_info(void);
const char *ll_llama_version(void);          /* the loaded libllama's own version */
const char *ll_build_source(void);           /* where the headers/libs came from */
const char *ll_build_lcp_version(void);      /* llama-cpp-python version compiled against */
const char *ll_build_header_sha256(void);    /* sha256 of the llama.h compiled against */
int ll_supports_gpu_offload(void);
int ll_supports_mmap(void);

/* ---- logging: llama.cpp's log lines go to a bounded buffer in C ---------- */
/* min_level: ggml_log_level (1 debug, 2 info, 3 warn, 4 error); echo != 0 also
 * writes them to stderr.  Installing is idempotent. */
void ll_log_capture(int min_level, int echo);
/* Copy up to len-1 bytes of captured text into buf (NUL-terminated), drop them
 * from the buffer, return the number of bytes copied. */
int ll_log_take(char *buf, int len);

/* ---- ggml backend devices ------------------------------------------------ */
int ll_dev_count(void);
/* type is a ggml_backend_dev_type value (0 cpu, 1 gpu, 2 igpu, 3 accel).  With
 * mem_free and mem_total NULL the device's memory is not queried. */
int ll_dev_info(int i, char *name, int name_len, char *desc, int desc_len,
                int *type, size_t *mem_free, size_t *mem_total);

/* Name of the backend registry that owns device i ("CPU", "CUDA", "RPC[host:port]"). */
int ll_dev_reg_name(int i, char *name, int name_len);

/* 1 when device i has a host (pinned) buffer type: llama.cpp then keeps the weights of
 * CPU layers there, ahead of the CPU's extra buffer types.  -1 for a bad index. */
int ll_dev_has_host_buffer(int i);

/* ---- the CPU backend's extra buffer types --------------------------------- */
/* The buffer types (AMX, CPU_REPACK, KleidiAI...) where llama.cpp puts a repacked copy
 * of the CPU's weights, in the order it tries them; what ggml types they hold. */
int ll_cpu_extra_buft_count(void);
int ll_cpu_extra_buft_name(int i, char *name, int name_len);
int ll_ggml_type_count(void);
const char *ll_ggml_type_name(int type);  /* "" for a removed type */
/* Would llama.cpp put a weight of ggml type `type`, k x rows (n_mat > 1: a stack of
 * n_mat experts used by MUL_MAT_ID), in extra buffer type i?  Asked exactly as its
 * loader asks.  1 yes, 0 no, -1 bad arguments; *copy_size is what the copy there
 * takes and *size the weight's own bytes. */
int ll_cpu_extra_buft_takes(int i, int type, int64_t k, int64_t rows, int64_t n_mat,
                            size_t *copy_size, size_t *size);

/* Multiply a k x rows weight of ggml type `type` (one ggml_quantize_chunk makes from
 * floats) by a k x m input, with the weight once in extra buffer type i and once in the
 * plain CPU buffer, on n_threads threads, `rounds` times with a short pause between;
 * compare the products.  1 they agree, 0 they differ (*err: the largest difference over
 * the largest output), -1 bad arguments or a weight type i does not take, -2 out of
 * memory.  A broken kernel may instead crash the process: run it in a throwaway one. */
int ll_cpu_extra_buft_selftest(int i, int type, int64_t k, int64_t rows, int64_t m,
                               int n_threads, int rounds, double *err);
/* Take the extra buffer type called `name` out of the list llama.cpp's loaders walk, for
 * every later load in this process (the rest keep their order).  1 taken out, 0 not
 * listed, -1 still listed afterwards (this ggml hands out a copy: use_extra_bufts 0 is
 * then the only way to keep it unused). */
int ll_cpu_extra_buft_drop(const char *name);
/* From now on, a SIGILL, SIGSEGV or SIGBUS first writes `text` (one line) to stderr,
 * then ends the process as before: the daemon shows a runner's last line.  Once per
 * process; 0 armed (or already), -1 failed. */
int ll_crash_hint(const char *text);

/* ---- backend plugins and RPC --------------------------------------------- */
const char *ll_ggml_version(void);
const char *ll_ggml_commit(void);
/* Load a ggml backend plugin (a GGML_BACKEND_DL library) into the process-wide
 * registry; its registry name goes into name.  0 ok, -1 refused (the reason,
 * e.g. an API version mismatch, is in the captured log). */
int ll_backend_load(const char *path, char *name, int name_len);
/* Register a ggml RPC server's devices through the loaded RPC plugin.  Returns
 * the number of devices it brings, -1 without an RPC plugin, -2 when the server
 * has no devices.  The caller checks reachability first: ggml aborts the
 * process when it cannot connect. */
int ll_rpc_add_server(const char *endpoint);
/* Serve the devices at these registry indices over ggml RPC; blocks for the
 * life of the process.  -1 without an RPC plugin, -2 for a bad device index. */
int ll_rpc_start_server(const char *endpoint, const char *cache_dir, int n_threads,
                        const int *devs, int n_devs);

/* ---- model --------------------------------------------------------------- */
/* paths: one file, or every split of a split GGUF in order.  devs: registry
 * indices of the offload devices in llama.cpp order (n_devs 0 = none: CPU only),
 * split_mode 0 none / 1 layer / 2 row, tensor_split: one proportion per device
 * (n_split 0 = by free memory), main_gpu: index into devs for split mode none.
 * cpu_patterns: tensor-name regexes kept in host memory (MoE experts).
 * use_extra_bufts 0: the CPU keeps its weights as the file has them, in no extra buffer
 * type (llama_model_params.use_extra_bufts, llama-bench's --repack 0).
 * NULL on failure (the reason is in the captured log). */
ll_model *ll_model_load(const char **paths, int n_paths, int n_gpu_layers,
                        int main_gpu, int use_mmap, int vocab_only,
                        const int *devs, int n_devs, int split_mode,
                        const float *tensor_split, int n_split,
                        const char **cpu_patterns, int n_patterns, int use_extra_bufts);
void ll_model_free(ll_model *m);
const char *ll_model_chat_template(const ll_model *m); /* NULL if none */
int ll_model_desc(const ll_model *m, char *buf, int len);
int ll_model_n_ctx_train(const ll_model *m);
int ll_model_n_layer(const ll_model *m);
int ll_model_n_embd(const ll_model *m);
int ll_model_n_vocab(const ll_model *m);

/* ---- vocab --------------------------------------------------------------- */
int32_t ll_token_bos(const ll_model *m);
int32_t ll_token_eos(const ll_model *m);
int ll_token_is_eog(const ll_model *m, int32_t token);
/* Returns the number of tokens, or -(needed) when n_max is too small. */
int ll_tokenize(const ll_model *m, const char *text, int text_len, int32_t *tokens,
                int n_max, int add_special, int parse_special);
/* Returns the piece's length in bytes, or -(needed) when len is too small. */
int ll_token_to_piece(const ll_model *m, int32_t token, char *buf, int len, int special);
int ll_detokenize(const ll_model *m, const int32_t *tokens, int n, char *buf, int len,
                  int remove_special, int unparse_special);

/* ---- context ------------------------------------------------------------- */
/* kv_type: "f32", "f16", "q8_0", "q4_0" (NULL = f16).  pooling: LL_POOLING_*;
 * LL_POOLING_DEFAULT takes the model's and, for embeddings, falls back to mean.
 * kv_unified: one KV buffer shared by all sequences (mixed batches then decode
 * in whole micro-batches; per-sequence limits are the caller's to keep).
 * device_sampling: plan for sampler chains attached to sequences (ll_sampler_attach):
 * any number of output rows per sequence, and the graph memory sampling takes. */
ll_context *ll_context_new(ll_model *m, uint32_t n_ctx, uint32_t n_seq_max,
                           uint32_t n_batch, uint32_t n_ubatch, int n_threads,
                           int n_threads_batch, int flash_attn, const char *kv_type,
                           int embeddings, int pooling, int kv_unified,
                           int device_sampling);
void ll_context_free(ll_context *c);
/* 1 when the context was made with device_sampling. */
int ll_device_sampling(const ll_context *c);
uint32_t ll_n_ctx(const ll_context *c);
int ll_pooling_type(const ll_context *c);
void ll_set_embeddings(ll_context *c, int on);
/* llama_decode's result: 0 ok, 1 no KV slot, 2 aborted, <0 error. */
int ll_decode(ll_context *c, ll_batch *b);
int ll_mem_seq_rm(ll_context *c, int32_t seq, int32_t p0, int32_t p1);
/* Give sequence dst the cells of src in positions [p0, p1); with the unified KV
 * cache the cells are shared, not copied (prefix sharing between slots). */
void ll_mem_seq_cp(ll_context *c, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* The smallest position a sequence still holds (a sliding-window cache drops old ones),
 * -1 when empty; and the model's attention window (0: none). */
int32_t ll_mem_seq_pos_min(ll_context *c, int32_t seq);
/* Move a sequence's cells in [p0, p1) by delta positions (context shift), and whether
 * this memory can do that at all (not for recurrent models). */
void ll_mem_seq_add(ll_context *c, int32_t seq, int32_t p0, int32_t p1, int32_t delta);
int ll_mem_can_shift(ll_context *c);
/* A sequence's cells as bytes (an idle slot parked in host memory, engine/park.py): the
 * size they take, a copy into dst, and a copy back into seq, which is emptied first
 * (0 when that fails, e.g. no run of free cells is long enough). */
size_t ll_state_seq_size(ll_context *c, int32_t seq);
size_t ll_state_seq_get(ll_context *c, int32_t seq, uint8_t *dst, size_t size);
size_t ll_state_seq_set(ll_context *c, int32_t seq, const uint8_t *src, size_t size);
int32_t ll_model_n_swa(const ll_model *m);
float *ll_embeddings_seq(ll_context *c, int32_t seq);
float *ll_embeddings_ith(ll_context *c, int32_t i);
/* Log-softmax of output i's logits: the sampled token's logprob into *token_lp
 * and the n most likely tokens into ids/lps (best first).  Returns n written. */
int ll_top_logprobs(ll_context *c, int32_t i, int32_t token, int n, int32_t *ids,
                    float *lps, float *token_lp);
/* The most likely token of output i, and its probability among the 10 likeliest
 * into *p_top (a draft model's greedy guess and how sure it is, as llama.cpp's
 * drafting measures it).  -1 if i has no logits. */
int32_t ll_greedy(ll_context *c, int32_t i, float *p_top);

/* ---- batch --------------------------------------------------------------- */
ll_batch *ll_batch_new(int n_tokens_max);
void ll_batch_free(ll_batch *b);
void ll_batch_clear(ll_batch *b);
int ll_batch_size(const ll_batch *b);
/* Add one token for one sequence; returns its index in the batch, -1 if full. */
int ll_batch_add(ll_batch *b, int32_t token, int32_t pos, int32_t seq, int logits);
/* Add n tokens at positions pos0.. for one sequence, logits only for the last
 * when logits_last; returns the last token's index, -1 if they do not fit. */
int ll_batch_add_seq(ll_batch *b, const int32_t *tokens, int n, int32_t pos0,
                     int32_t seq, int logits_last);

/* ---- sampler chain -------------------------------------------------------- */
/* temp <= 0 means greedy.  penalty_last_n: 0 off, -1 whole context.  grammar:
 * GBNF text with a "root" rule or NULL.  NULL return: the grammar did not parse. */
ll_sampler *ll_sampler_new(const ll_model *m, const ll_context *c, float temp, int top_k,
                           float top_p, float min_p, float typical_p, int penalty_last_n,
                           float penalty_repeat, float penalty_freq, float penalty_present,
                           uint32_t seed, const char *grammar);
void ll_sampler_free(ll_sampler *s);
/* Feed prompt tokens to the penalties and DRY only (a grammar constrains output, not
 * input), as llama-server feeds its prompt to the chain. */
void ll_sampler_accept_prompt(ll_sampler *s, const int32_t *tokens, int n);
/* Sample from output i and accept the token into the whole chain. */
int32_t ll_sampler_sample(ll_sampler *s, ll_context *c, int32_t i);

/* ---- the samplers past Ollama's: built up in an ll_sampler_extra, then passed
 * to ll_sampler_new_ext, which places each where llama.cpp's common chain does:
 * grammar, logit bias, penalties, DRY, top-n-sigma, top-k, typical-p, top-p, min-p,
 * XTC, temperature, then dist; or, with mirostat, grammar, logit bias, penalties,
 * DRY, temperature and mirostat (1 or 2) in place of the truncating steps. */
ll_sampler_extra *ll_sampler_extra_new(void);
void ll_sampler_extra_free(ll_sampler_extra *x);
/* Add n (token, bias) pairs; tokens must be in the vocabulary.  0 ok, -1 no memory. */
int ll_sampler_extra_bias(ll_sampler_extra *x, const int32_t *tokens, const float *biases,
                          int n);
/* DRY; penalty_last_n -1 is the whole context.  The breakers are copied.  0 ok, -1 no memory. */
int ll_sampler_extra_dry(ll_sampler_extra *x, float multiplier, float base,
                         int allowed_length, int penalty_last_n, const char **breakers,
                         int n_breakers);
void ll_sampler_extra_xtc(ll_sampler_extra *x, float probability, float threshold);
void ll_sampler_extra_top_n_sigma(ll_sampler_extra *x, float n); /* <= 0 off */
void ll_sampler_extra_mirostat(ll_sampler_extra *x, int version, float tau, float eta);
/* ll_sampler_new with the extra samplers (x may be NULL: the same chain). */
ll_sampler *ll_sampler_new_ext(const ll_model *m, const ll_context *c, float temp, int top_k,
                               float top_p, float min_p, float typical_p, int penalty_last_n,
                               float penalty_repeat, float penalty_freq,
                               float penalty_present, uint32_t seed, const char *grammar,
                               const ll_sampler_extra *x);

/* ---- sampling on the device (llama.cpp's backend sampling) ------------------ */
/* A chain that runs in the decode's own graph, on the device that holds the output
 * layer, once attached to a sequence: greedy when temp <= 0, else top_k, top_p, min_p,
 * temp and dist(seed) as ll_sampler_new builds them (grammar, penalties and typical-p
 * have no device form: such requests keep host chains).  Only the token comes back. */
ll_sampler *ll_sampler_new_device(const ll_model *m, float temp, int top_k, float top_p,
                                  float min_p, uint32_t seed);
/* From the next decode, seq's outputs are sampled on the device and ll_sampler_sample
 * reads the token.  1 attached; 0 not (this context cannot).  Once per chain: a
 * detached chain is freed, not attached again.  The context re-plans its graph memory
 * at the next decode after every attach and detach. */
int ll_sampler_attach(ll_sampler *s, ll_context *c, int32_t seq);
/* Detach from its sequence (before the chain is freed: the context keeps a pointer). */
void ll_sampler_detach(ll_sampler *s);
/* Start over as a new chain would (a fixed seed draws its first number again). */
void ll_sampler_reset(ll_sampler *s);

/* ---- LoRA adapters -------------------------------------------------------- */
ll_lora *ll_lora_load(ll_model *m, const char *path);
void ll_lora_free(ll_lora *a);
/* Replace the context's adapters with these (n = 0 clears); 0 on success. */
int ll_lora_apply(ll_context *c, ll_lora **adapters, float *scales, int n);

/* ---- quantize ------------------------------------------------------------- */
/* ftype by name ("Q4_K_M", "Q8_0", "F16", ...; case-insensitive), -1 if unknown. */
int ll_ftype_from_name(const char *name);
/* 0 on success. */
int ll_quantize(const char *in_path, const char *out_path, int ftype, int nthread);

/* ---- multimodal projector (libmtmd) ---------------------------------------- */
typedef struct ll_mtmd ll_mtmd;
typedef struct ll_chunks ll_chunks;

#define LL_CHUNK_TEXT 0
#define LL_CHUNK_IMAGE 1
#define LL_CHUNK_AUDIO 2

/* Errors of ll_mtmd_tokenize (returned through *err; *bad = the image's index). */
#define LL_MEDIA_OK 0
#define LL_MEDIA_COUNT 1      /* markers and images differ in number */
#define LL_MEDIA_PREPROC 2    /* libmtmd could not preprocess an image */
#define LL_MEDIA_DECODE 3     /* an image file did not decode */
#define LL_MEDIA_AUDIO 4      /* an audio file where an image was expected */

const char *ll_mtmd_default_marker(void);
/* Load a projector (mmproj GGUF) for this text model.  use_gpu: run it on device
 * dev (a registry index; -1 = libmtmd's choice).  NULL on failure (see the log). */
ll_mtmd *ll_mtmd_load(const char *path, const ll_model *m, int use_gpu, int dev,
                      int n_threads, int flash_attn, int warmup);
void ll_mtmd_free(ll_mtmd *x);
int ll_mtmd_supports_vision(const ll_mtmd *x);
int ll_mtmd_uses_mrope(const ll_mtmd *x);
int ll_mtmd_non_causal(const ll_mtmd *x);   /* images decode with non-causal attention */
int ll_mtmd_n_embd(const ll_mtmd *x);       /* floats per image token (the text model's input width) */
/* Decode n encoded image files (PNG, JPEG, GIF, BMP...) and tokenize the text with
 * them, one per media marker in order; each image's id is its sha256 (hex).  The
 * images are decoded one at a time, each freed before the next (the chunks keep only
 * their preprocessed copies); the chunks are those one libmtmd tokenization of the
 * whole text would make.  NULL on failure with *err = LL_MEDIA_* and *bad = the failing
 * image's index (-1 when not known). */
ll_chunks *ll_mtmd_tokenize(ll_mtmd *x, const char *text, int add_special, int parse_special,
                            const unsigned char **bufs, const size_t *lens, int n,
                            int *err, int *bad);
/* The same with every image decoded first and one libmtmd tokenization: what
 * ll_mtmd_tokenize falls back to, and the reference the tests hold it to. */
ll_chunks *ll_mtmd_tokenize_at_once(ll_mtmd *x, const char *text, int add_special,
                                    int parse_special, const unsigned char **bufs,
                                    const size_t *lens, int n, int *err, int *bad);
void ll_chunks_free(ll_chunks *c);
int ll_chunks_count(const ll_chunks *c);
/* Chunk i: its type (LL_CHUNK_*), tokens, positions and id (images only; "" for text). */
int ll_chunk_info(const ll_chunks *c, int i, int *type, int *n_tokens, int *n_pos,
                  char *id, int id_len);
/* Copy chunk i's text tokens into out (cap entries); returns how many it holds. */
int ll_chunk_text_tokens(const ll_chunks *c, int i, int32_t *out, int cap);
/* Encode image chunk i and copy its embeddings (n_tokens * n_embd floats) into out
 * (cap floats).  0 ok, -1 not an image chunk or out too small, else libmtmd's error. */
int ll_mtmd_encode(ll_mtmd *x, const ll_chunks *c, int i, float *out, size_t cap);
/* Decode n rows of embeddings (n_embd floats each) of seq into the context, logits for
 * the last row when logits_last (its output index is n - 1); non_causal: attend both
 * ways within the batch (Gemma 3 images).  pos4: 4 positions per row, row-major (t, y,
 * x, z as ll_chunk_image_pos gives them) for M-RoPE models; NULL: rows at pos0, pos0+1...
 * (every section alike for M-RoPE models).  llama_decode's code. */
int ll_decode_embd(ll_context *c, const float *embd, int n, int n_embd, int32_t pos0,
                   const int32_t *pos4, int32_t seq, int logits_last, int non_causal);
/* Positions per token the model's llama batches carry: 4 for M-RoPE (Qwen2/2.5/3-VL),
 * else 1.  Token batches always carry one: llama.cpp copies it into every section. */
int ll_model_n_pos_per_embd(const ll_model *m);
/* Image chunk i's decoder positions when it starts at pos0: 4 per token (t, y, x, z),
 * row-major, into out (cap entries).  Returns the token count, -1 for a text chunk or
 * too small an out. */
int ll_chunk_image_pos(const ll_chunks *c, int i, int32_t pos0, int32_t *out, int cap);
/* The highest position seq holds in the KV memory (-1 when empty). */
int32_t ll_mem_seq_pos_max(ll_context *c, int32_t seq);
/* llama.cpp's own evaluation of all chunks into seq from position *n_past (text and
 * images, through mtmd_helper_eval_chunks; logits for the last token, read at index
 * -1).  *n_past becomes the next position.  The reference tests hold the engine to. */
int ll_mtmd_eval_chunks(ll_mtmd *x, ll_context *c, const ll_chunks *ch, int32_t seq,
                        int n_batch, int32_t *n_past);
