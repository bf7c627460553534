/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared helpers of the transport integration tests: a real ferry-gcs process, nodes embedded
 * in the test process (node/node.h) or run as ferry-node processes, objects with a checkable
 * byte pattern.
 */
#ifndef FERRY_TESTS_TRANSPORT_UTIL_H
#define FERRY_TESTS_TRANSPORT_UTIL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "node/node.h"
#include "transport/objmgr.h"

#define TT_TOKEN "transport-token"

struct tt_proc {
	pid_t pid;	   /* the process */
	uint16_t port;	   /* ferry-gcs: its port */
	char socket[108];  /* ferry-node: its store socket */
	char address[256]; /* ferry-node: its advertised address */
};

/* Start ferry-gcs (FERRY_GCS_BIN); skips the test without it. */
struct tt_proc tt_gcs_start(void);
/* Start ferry-node (FERRY_NODE_BIN) against @gcs_port with @memory ("256M") and a store
 * socket named @name in the test's directory. */
struct tt_proc tt_node_proc_start(uint16_t gcs_port, const char *memory, const char *name);
/* The same with --transport @transport and --ip @ip. */
struct tt_proc tt_node_proc_start_ex(uint16_t gcs_port, const char *memory, const char *name,
				     const char *transport, const char *ip);
/* Send @sig to @p: SIGSTOP returns once every thread is stopped, SIGTERM and SIGKILL once it
 * was reaped (SIGTERM: asserting a clean exit). */
void tt_proc_signal(struct tt_proc *p, int sig);

/* An embedded node: @memory_mib of store, TCP only when @no_shm, pull deadline @timeout_ms
 * (0: default). */
struct ferry__node *tt_node_start(uint16_t gcs_port, unsigned memory_mib, bool no_shm,
				  uint32_t timeout_ms);
/* The same with a transport choice and a serving address (NULL: 127.0.0.1). */
/* The object managers' busy-poll window (--spin-us) of nodes started from now on; 0 default. */
extern uint32_t tt_node_spin_us;
/* The directory thread's copy gathering window (copy_batch_us) of nodes started from now on;
 * 0 default. */
extern uint32_t tt_node_copy_batch_us;
/* The object managers' notice_hold_ms of nodes started from now on; 0 default. */
extern uint32_t tt_node_notice_hold_ms;
/* Where nodes started from now on (embedded or processes) spill primaries; NULL (default):
 * they do not. */
extern const char *tt_node_spill_dir;
/* --objmgr-loop for the nodes started next ("own", "node"); NULL: FERRY_TEST_OBJMGR_LOOP, else
 * the default (auto: the node's loop on a host without RDMA). */
extern const char *tt_node_objmgr_loop;
struct ferry__node *tt_node_start_ex(uint16_t gcs_port, unsigned memory_mib, bool no_shm,
				     uint32_t timeout_ms, enum ferry__node_transport transport,
				     const char *ip);
/* A test-side GCS client. */
struct ferry_gcs_client *tt_gcs_client(uint16_t gcs_port);

/*
 * The setup most tests share: a ferry-gcs process, embedded nodes started in order and,
 * where a test asks for one, a test-side GCS client. tt_cluster_stop() undoes it in reverse.
 */
#define TT_MAX_NODES 4

struct tt_cluster {
	struct tt_proc gcs;			/* the ferry-gcs process */
	struct ferry__node *node[TT_MAX_NODES]; /* in start order; NULL once stopped early */
	unsigned count;				/* node[0..count) were started */
	bool no_shm;				/* every node's, as tt_node_start_ex() takes them */
	enum ferry__node_transport transport;	/* likewise */
	const char *ip;				/* likewise (borrowed until tt_cluster_stop()) */
	struct ferry_gcs_client *c;		/* tt_cluster_client()'s, else NULL */
};

/* Start the GCS and @nodes nodes of tt_node_start() (TCP on 127.0.0.1), each with
 * @memory_mib of store, @no_shm and pull deadline @timeout_ms. No client yet. */
struct tt_cluster tt_cluster_start(unsigned nodes, unsigned memory_mib, bool no_shm,
				   uint32_t timeout_ms);
/* The same with tt_node_start_ex()'s @transport and @ip, kept for tt_cluster_add(). */
struct tt_cluster tt_cluster_start_ex(unsigned nodes, unsigned memory_mib, bool no_shm,
				      uint32_t timeout_ms, enum ferry__node_transport transport,
				      const char *ip);
/* One more node like the others (no_shm, transport, ip) but with its own @memory_mib and
 * @timeout_ms: for tests whose nodes differ. Returns it (also node[count - 1]). */
struct ferry__node *tt_cluster_add(struct tt_cluster *t, unsigned memory_mib, uint32_t timeout_ms);
/* Connect t->c and return it. A step of its own, after the nodes: a client is a connection and
 * a loop thread more, so tests that had none still have none, and those that had one started
 * it last. */
struct ferry_gcs_client *tt_cluster_client(struct tt_cluster *t);
/* Stop @n, one of the cluster's nodes, now (a dead or vanished location under test); its slot
 * becomes NULL, so tt_cluster_stop() skips it. */
void tt_cluster_stop_node(struct tt_cluster *t, struct ferry__node *n);
/* Destroy the client, stop the nodes from the last started, then SIGTERM the GCS (which must
 * exit with status 0). */
void tt_cluster_stop(struct tt_cluster *t);

/* The byte of object @seed at @i. */
static inline uint8_t tt_byte(uint64_t seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	return (uint8_t)(x ^ (x >> 29) ^ (x >> 47));
}

/* Put @size bytes of pattern @seed (+ 3 bytes of metadata) as @id into the store at @socket. */
void tt_put(const char *socket, const struct ferry_object_id *id, uint64_t size, uint64_t seed);
/* Check that @id is sealed in the store at @socket with @size bytes of pattern @seed. */
void tt_check(const char *socket, const struct ferry_object_id *id, uint64_t size, uint64_t seed);
/* 1 if @id exists in the store at @socket in any state (sealed or being created), else 0. */
int tt_present(const char *socket, const struct ferry_object_id *id);
/* Put objects of 0 B, 1 B, 4 KiB, 1 MiB and 64 MiB on @a; pull each to @b, which must use
 * @want_transport from @a and get the bytes exact; a second pull finds it local and the copy
 * gets listed in the directory. */
void tt_move_sizes(uint16_t gcs_port, struct ferry__node *a, struct ferry__node *b,
		   unsigned want_transport);
/*
 * A thread that SIGKILLs @victim once @watch's counters show a transfer under way (@served: it
 * served a request; else it admitted bytes or ended a pull), @delay_ms later. start: begin
 * watching; join: wait for the kill and reap @victim.
 */
struct tt_killer {
	struct ferry__objmgr *watch; /* whose counters tell the moment */
	bool served;		     /* watch requests served (a source), else a puller */
	pid_t victim;		     /* the process to kill */
	unsigned delay_ms;	     /* after the moment */
	pthread_t thread;	     /* private */
};
void tt_killer_start(struct tt_killer *k);
void tt_killer_join(struct tt_killer *k);

/* Pull @id on @om from @nthreads threads at once (ferry__objmgr_pull_wait(), TT_MAX_PULLERS
 * at most) and wait for them all: each pull must succeed. */
#define TT_MAX_PULLERS 16
void tt_pull_concurrently(struct ferry__objmgr *om, const struct ferry_object_id *id,
			  unsigned nthreads);

/* A pull of @id (@size bytes of pattern @seed) that ended with @ret while its only source was
 * killed: the copy is whole on @puller, or the pull says -ECONNRESET and left nothing. */
void tt_check_killed_pull(int ret, struct ferry__node *puller, const struct ferry_object_id *id,
			  uint64_t size, uint64_t seed);

/* Does the directory list @id at @nloc or more nodes, and at @node (unless NULL), within @ms
 * (polled every 5 ms; 0: one look)? */
bool tt_listed(struct ferry_gcs_client *c, const struct ferry_object_id *id,
	       const struct ferry_node_id *node, uint32_t nloc, unsigned ms);
/* Wait (10 s at most: a hang guard) until the directory lists @id at @nloc or more nodes. */
void tt_wait_location(struct ferry_gcs_client *c, const struct ferry_object_id *id, uint32_t nloc);

/* The location cache (objmgr_locs.c): tt_warm_cache() pulls, from @om, an object put on
 * @src_socket, which starts @om's cache; tt_wait_cached() makes it follow @id (as a pull of
 * it would), waits (10 s at most) until it lists @id at @n nodes and returns them in @out
 * (FERRY__OBJMGR_CACHED_LOCATIONS room). */
void tt_warm_cache(struct ferry__objmgr *om, const char *src_socket, struct ferry_gcs_client *c);
void tt_wait_cached(struct ferry__objmgr *om, const struct ferry_object_id *id, uint32_t n,
		    struct ferry_node_id *out);
/* The node's object manager counters. */
struct ferry__objmgr_stats tt_stats(struct ferry__node *n);

/* A pull on @b of @id, put on @a, once @c lists it there and @b's location cache has it (the
 * fast path's start): its result and both nodes' counters just before and after. */
struct tt_pulled {
	struct ferry__objmgr_result res;   /* the pull's */
	struct ferry__objmgr_stats a0, a1; /* @a before, after */
	struct ferry__objmgr_stats b0, b1; /* @b before, after */
};
struct tt_pulled tt_pull_cached(struct ferry_gcs_client *c, struct ferry__node *a,
				struct ferry__node *b, const struct ferry_object_id *id);

#endif
