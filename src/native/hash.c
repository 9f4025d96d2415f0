// sha256 off the event loop, for digests of streams that pass by in large
// chunks (layer tars, blobs): sha256New() -> handle; sha256Update(handle,
// buffers) -> Promise, which hashes the buffers in order on a libuv pool
// thread (one update at a time per handle: the caller's rule, see
// engine/os/sha256.ts); sha256Digest(handle) -> hex, once no update runs. The
// OpenSSL is Node's own (its symbols are the process's).
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>

#include "addon.h"
#include "args.h"

typedef struct {
  EVP_MD_CTX *ctx;
  int busy;
} sha_t;

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref handle_ref;
  napi_ref buffers_ref;
  sha_t *sha;
  uint32_t n;
  const unsigned char **data;
  size_t *len;
  int ok;
} sha_job_t;

static void sha_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  sha_t *sha = data;
  EVP_MD_CTX_free(sha->ctx);
  free(sha);
}

BINDING(js_sha256_new) {
  (void)info;
  sha_t *sha = calloc(1, sizeof *sha);
  if (!sha) return throw_message(env, "ENOMEM", "out of memory");
  sha->ctx = EVP_MD_CTX_new();
  if (!sha->ctx || EVP_DigestInit_ex(sha->ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(sha->ctx);
    free(sha);
    return throw_message(env, NULL, "sha256: OpenSSL refused to start a digest");
  }
  napi_value out;
  if (napi_create_external(env, sha, sha_finalize, NULL, &out) != napi_ok) {
    sha_finalize(env, sha, NULL);
    return throw_message(env, NULL, "sha256: cannot make a handle");
  }
  return out;
}

static void sha_execute(napi_env env, void *data) {
  (void)env;
  sha_job_t *j = data;
  j->ok = 1;
  for (uint32_t i = 0; i < j->n && j->ok; i++) j->ok = EVP_DigestUpdate(j->sha->ctx, j->data[i], j->len[i]) == 1;
}

static void sha_job_free(sha_job_t *j) {
  free(j->data);
  free(j->len);
  free(j);
}

static void sha_complete(napi_env env, napi_status status, void *data) {
  sha_job_t *j = data;
  j->sha->busy = 0;
  if (status == napi_ok && j->ok) napi_resolve_deferred(env, j->deferred, js_undefined(env));
  else {
    napi_value msg, err;
    napi_create_string_utf8(env, "sha256: update failed", NAPI_AUTO_LENGTH, &msg);
    napi_create_error(env, NULL, msg, &err);
    napi_reject_deferred(env, j->deferred, err);
  }
  napi_delete_reference(env, j->handle_ref);
  napi_delete_reference(env, j->buffers_ref);
  napi_delete_async_work(env, j->work);
  sha_job_free(j);
}

// Points the job at each Buffer of the array (which stays referenced while the job runs).
static bool sha_job_buffers(napi_env env, sha_job_t *j, napi_value array) {
  if (napi_get_array_length(env, array, &j->n) != napi_ok) return false;
  j->data = calloc(j->n ? j->n : 1, sizeof *j->data);
  j->len = calloc(j->n ? j->n : 1, sizeof *j->len);
  if (!j->data || !j->len) return false;
  for (uint32_t i = 0; i < j->n; i++) {
    napi_value b;
    void *p = NULL;
    if (napi_get_element(env, array, i, &b) != napi_ok || napi_get_buffer_info(env, b, &p, &j->len[i]) != napi_ok) {
      return false;
    }
    j->data[i] = p;
  }
  return true;
}

// The handle behind argument 0 when no update runs on it; NULL with an exception pending otherwise.
static sha_t *sha_arg(args_t *a, const char *when_busy) {
  sha_t *sha = args_external(a, 0, "sha256");
  if (sha && sha->busy) {
    throw_message(a->env, NULL, when_busy);
    return NULL;
  }
  return sha;
}

BINDING(js_sha256_update) {
  ARGS(a, 2);
  sha_t *sha = sha_arg(&a, "sha256: an update is already running");
  if (!sha) return NULL;
  bool is_array = false;
  napi_is_array(env, a.argv[1], &is_array);
  if (!is_array) {
    napi_throw_type_error(env, NULL, "buffers must be an array");
    return NULL;
  }
  sha_job_t *j = calloc(1, sizeof *j);
  if (!j) return throw_message(env, "ENOMEM", "out of memory");
  j->sha = sha;
  if (!sha_job_buffers(env, j, a.argv[1])) {
    sha_job_free(j);
    napi_throw_type_error(env, NULL, "buffers must hold Buffers");
    return NULL;
  }
  // The handle and the array (so its buffers) stay alive until the thread is done with them.
  napi_value promise, name;
  napi_create_string_utf8(env, "berth.sha256", NAPI_AUTO_LENGTH, &name);
  napi_create_reference(env, a.argv[0], 1, &j->handle_ref);
  napi_create_reference(env, a.argv[1], 1, &j->buffers_ref);
  if (napi_create_promise(env, &j->deferred, &promise) != napi_ok ||
      napi_create_async_work(env, NULL, name, sha_execute, sha_complete, j, &j->work) != napi_ok ||
      napi_queue_async_work(env, j->work) != napi_ok) {
    if (j->work) napi_delete_async_work(env, j->work);
    napi_delete_reference(env, j->handle_ref);
    napi_delete_reference(env, j->buffers_ref);
    sha_job_free(j);
    return throw_message(env, NULL, "sha256: cannot queue the update");
  }
  sha->busy = 1;
  return promise;
}

BINDING(js_sha256_digest) {
  ARGS(a, 1);
  sha_t *sha = sha_arg(&a, "sha256: an update is still running");
  if (!sha) return NULL;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (EVP_DigestFinal_ex(sha->ctx, md, &mdlen) != 1) return throw_message(env, NULL, "sha256: final failed");
  char hex[2 * EVP_MAX_MD_SIZE + 1];
  for (unsigned int i = 0; i < mdlen; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  EVP_DigestInit_ex(sha->ctx, EVP_sha256(), NULL); // usable again, from the start
  napi_value out;
  napi_create_string_utf8(env, hex, 2 * mdlen, &out);
  return out;
}
