/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A job's code in the GCS, by content hash: the layout the driver writes (runtime/code.c) and
 * a node reads when the library a lease names is not on its host (node/rt_code.c).
 *
 * Layout, in KV namespace FERRY__CODE_NS: the library's bytes in chunks of at most
 * FERRY__CODE_CHUNK_BYTES under "<sha256 hex>.<i>" (i = 0, 1, ...), then, written last, the
 * key "<sha256 hex>" whose value is the library's size in bytes as decimal ASCII. A reader
 * trusts only the marker: chunks without it are an upload that did not finish. Chunks because
 * one GCS value and one frame are capped at 16 MiB (gcs/kv.h, common/frame.h); 4 MiB leaves
 * room for the frame's other fields and keeps one reply's buffer modest.
 */
#ifndef FERRY_NODE_RT_CODE_H
#define FERRY_NODE_RT_CODE_H

#include <stdint.h>

#define FERRY__CODE_NS "ferry:code"
#define FERRY__CODE_CHUNK_BYTES (4u << 20)
/* The largest library a job may store: the GCS keeps it in memory (and in its WAL). */
#define FERRY__CODE_MAX_BYTES (256ull << 20)
/* "<64 hex>.<chunk>" */
#define FERRY__CODE_KEY_MAX 80

struct ferry__node_rt;
struct rt_req;
struct rt_peer;

/*
 * ferry__rt_code_resolve() - make @req's code usable on this host: the file it names if it is
 * there and hashes to its code_hash, else a verified copy in the node's cache, else a fetch
 * from the GCS (asynchronous: the request is parked and handed to ferry__rt_lease_code_done()
 * when the fetch ends, one fetch per hash however many requests wait). Returns 0 (ready now),
 * 1 (parked), -ENOMEM. Loop thread.
 */
int ferry__rt_code_resolve(struct ferry__node_rt *rt, struct rt_req *req);
/* The path a worker assigned @req loads. */
const char *ferry__rt_code_path(const struct rt_req *req);
/*
 * ferry__rt_code_retry() - a worker could not use @req's code (@status -EBADMSG: its bytes do
 * not match the hash, -ENOENT: gone): forget the copy the node had, fetch it again and park
 * @req (once per request). 1 if @req was taken (parked or queued again), 0 if not (the caller
 * fails it).
 */
int ferry__rt_code_retry(struct ferry__node_rt *rt, struct rt_req *req, int status);
/* Requests of @p parked for their code forget it (its connection closed). */
void ferry__rt_code_peer_gone(struct ferry__node_rt *rt, struct rt_peer *p);
/* Requests parked for code (counted with the queue's). */
uint32_t ferry__rt_code_parked(const struct ferry__node_rt *rt);
/* The loop no longer runs (its thread joined), before it is destroyed: end the disk helper;
 * the jobs it had end here, their parked requests answered -ECANCELED. */
void ferry__rt_code_stop(struct ferry__node_rt *rt);
/* After the GCS client and the disk helper are gone: free every entry, remove the cache. */
void ferry__rt_code_free(struct ferry__node_rt *rt);

#endif
