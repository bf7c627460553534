/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration tests of the object manager: a real ferry-gcs and two or three nodes on
 * loopback (embedded, or ferry-node processes for the kill tests). Objects of 0 B to 64 MiB
 * move byte-exact over TCP and over shm; concurrent pulls of one object move it once; a dead
 * or stalled source fails over to another location or ends in -ECONNRESET / -ETIMEDOUT with no
 * half-written object; a full store says -ENOSPC; an absent object -ENOENT; a local get of a
 * remote object pulls it (the store's miss hook).
 */
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "plasma/client_arena.h"
#include "plasma/server.h"
#include "plasma/store.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"
#include "tests/integration/transport/transport_util.h"
#include "transport/objmgr_int.h"

static void move_sizes(bool no_shm, unsigned want_transport)
{
	struct tt_cluster t = tt_cluster_start(2, 160, no_shm, 0);

	tt_move_sizes(t.gcs.port, t.node[0], t.node[1], want_transport);
	tt_cluster_stop(&t);
}

FTEST(sizes_over_tcp)
{
	move_sizes(true, FERRY_GCS_TRANSPORT_TCP);
}

FTEST(sizes_over_shm)
{
	move_sizes(false, FERRY_GCS_TRANSPORT_SHM);
}

FTEST(concurrent_pulls_move_once)
{
	struct tt_cluster t = tt_cluster_start(2, 96, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry__objmgr_stats sa, sb;
	struct ferry_object_id id;
	const uint64_t size = 8u << 20;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, size, 7);
	ftest_assert_ok(ferry__node_sync(a));
	tt_pull_concurrently(ferry__node_objmgr(b), &id, 8);
	tt_check(ferry__node_socket(b), &id, size, 7);
	ferry__objmgr_get_stats(ferry__node_objmgr(a), &sa);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &sb);
	/* The bytes crossed once, whether late callers joined or found the copy sealed. */
	ftest_assert_uint_eq(sa.bytes_served, size);
	ftest_assert_uint_eq(sb.pulls_ok, sb.pulls_started);
	ftest_assert_uint_eq(sb.pulls_started + sb.pulls_joined, 8);
	tt_cluster_stop(&t);
}

FTEST(absent_object)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry_worker_id w;
	struct ferry_object_id id;

	/* Not in the directory at all. */
	ferry_worker_id_random(&w);
	ferry_object_id_random(&id);
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL), -ENOENT);
	/* Listed at A, but A does not have it: A answers -ENOENT, never reads anything. */
	ftest_assert_int_eq(ferry_gcs_object_add(c, &id, &w, ferry__node_id(a), 100), 1);
	ftest_assert_int_eq(ferry_gcs_object_add_location(c, &id, ferry__node_id(a), 100), 1);
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL), -ENOENT);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &id), 0);
	tt_cluster_stop(&t);
}

FTEST(store_full_on_puller)
{
	struct tt_cluster t = tt_cluster_start(1, 128, true, 0);
	struct ferry__node *a = t.node[0], *b = tt_cluster_add(&t, 64, 0);
	struct ferry_object_id filler, id;
	struct ferry__objmgr_stats st;

	/* B's store is mostly held by a primary copy (no spill dir: it cannot move). */
	ferry_object_id_random(&filler);
	tt_put(ferry__node_socket(b), &filler, 48u << 20, 1);
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 32u << 20, 2);
	ftest_assert_ok(ferry__node_sync(a));
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL), -ENOSPC);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &id), 0);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &st);
	ftest_assert_uint_eq(st.bytes_in_flight, 0);
	tt_cluster_stop(&t);
}

FTEST(dead_location_fails_over)
{
	struct tt_cluster t = tt_cluster_start(3, 64, true, 0);
	struct ferry__node *a1 = t.node[0], *a2 = t.node[1], *b = t.node[2];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry__objmgr_result res;
	struct ferry_node_id a2_id = *ferry__node_id(a2);
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a1), &id, 3u << 20, 5);
	tt_put(ferry__node_socket(a2), &id, 3u << 20, 5);
	ftest_assert_ok(ferry__node_sync(a1));
	ftest_assert_ok(ferry__node_sync(a2));
	tt_wait_location(c, &id, 2);
	/* A2 goes away (its record stays in the directory for now): B must use A1. */
	tt_cluster_stop_node(&t, a2);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res));
	ftest_assert_false(ferry_node_id_eq(&res.source, &a2_id));
	tt_check(ferry__node_socket(b), &id, 3u << 20, 5);
	tt_cluster_stop(&t);
}

/* The live peers whose addresses @om's node table holds. */
static size_t peers_known(struct ferry__objmgr *om)
{
	size_t n;

	pthread_mutex_lock(&om->lock);
	n = ferry__hashmap_count(&om->nodes);
	pthread_mutex_unlock(&om->lock);
	return n;
}

/*
 * A node holds the addresses of the peers it pulled from, not every node's (issue 22: every
 * node on the whole nodes channel cost N joins x N deliveries), and a peer's death reaches it
 * through that peer's keyed subscription: the address goes.
 */
FTEST(a_node_looks_up_only_the_peers_it_pulls_from)
{
	struct tt_cluster t = tt_cluster_start(3, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[2];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry__objmgr *om = ferry__node_objmgr(b);
	struct ferry__objmgr_result res;
	struct ferry_node_id a_id = *ferry__node_id(a);
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 4096, 7);
	ftest_assert_ok(ferry__node_sync(a));
	tt_wait_location(c, &id, 1);
	ftest_assert_uint_eq(peers_known(om), 0);
	ftest_assert_ok(ferry__objmgr_pull_wait(om, &id, &res));
	ftest_assert_true(ferry_node_id_eq(&res.source, &a_id));
	ftest_assert_uint_eq(peers_known(om), 1); /* a: not node[1], not itself */
	tt_cluster_stop_node(&t, a);
	for (int i = 0; i < 200 && peers_known(om); i++)
		usleep(50 * 1000); /* a hang, not a speed check: the deadline is 1 s */
	ftest_assert_uint_eq(peers_known(om), 0);
	tt_cluster_stop(&t);
}

/* A large object at two locations comes in parts from both at once. */
FTEST(large_pull_uses_two_sources)
{
	struct tt_cluster t = tt_cluster_start(3, 96, true, 0);
	struct ferry__node *a1 = t.node[0], *a2 = t.node[1], *b = t.node[2];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry__objmgr_stats s1, s2;
	struct ferry_object_id id;
	const uint64_t size = 40u << 20;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a1), &id, size, 21);
	tt_put(ferry__node_socket(a2), &id, size, 21);
	ftest_assert_ok(ferry__node_sync(a1));
	ftest_assert_ok(ferry__node_sync(a2));
	tt_wait_location(c, &id, 2);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL));
	tt_check(ferry__node_socket(b), &id, size, 21);
	ferry__objmgr_get_stats(ferry__node_objmgr(a1), &s1);
	ferry__objmgr_get_stats(ferry__node_objmgr(a2), &s2);
	ftest_log("served: %llu + %llu bytes, requests %llu + %llu, pulls %llu + %llu",
		  (unsigned long long)s1.bytes_served, (unsigned long long)s2.bytes_served,
		  (unsigned long long)s1.requests_served, (unsigned long long)s2.requests_served,
		  (unsigned long long)s1.pulls_started, (unsigned long long)s2.pulls_started);
	ftest_assert_uint_eq(s1.bytes_served + s2.bytes_served, size);
	ftest_assert_uint_gt(s1.bytes_served, 0);
	ftest_assert_uint_gt(s2.bytes_served, 0);
	tt_cluster_stop(&t);
}

/* A listed source that lacks the object: as the main source it is skipped; as a helper its
 * part is fetched again from the main one. Either way the copy is whole. */
FTEST(large_pull_with_a_false_location)
{
	struct tt_cluster t = tt_cluster_start(3, 96, true, 0);
	struct ferry__node *a1 = t.node[0], *a2 = t.node[1], *b = t.node[2];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry_object_id id;
	const uint64_t size = 40u << 20;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a1), &id, size, 22);
	ftest_assert_ok(ferry__node_sync(a1));
	ftest_assert_int_eq(ferry_gcs_object_add_location(c, &id, ferry__node_id(a2), size), 1);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL));
	tt_check(ferry__node_socket(b), &id, size, 22);
	tt_cluster_stop(&t);
}

/* A stalled source (SIGSTOP): the deadline ends the attempt; with a second location the pull
 * succeeds there, with none it fails -ETIMEDOUT and leaves nothing behind. */
FTEST(stalled_source_times_out)
{
	struct tt_proc gcs = tt_gcs_start();
	struct tt_proc a = tt_node_proc_start(gcs.port, "96M", "a");
	struct ferry__node *b = tt_node_start(gcs.port, 96, true, 500);
	struct ferry_gcs_client *c = tt_gcs_client(gcs.port);
	struct ferry__objmgr_result res;
	struct ferry_object_id id, id2;
	struct ferry__node *a2;

	ferry_object_id_random(&id);
	ferry_object_id_random(&id2);
	tt_put(a.socket, &id, 2u << 20, 9);
	tt_put(a.socket, &id2, 2u << 20, 10);
	tt_wait_location(c, &id, 1);
	tt_wait_location(c, &id2, 1);
	a2 = tt_node_start(gcs.port, 64, true, 0);
	tt_put(ferry__node_socket(a2), &id2, 2u << 20, 10);
	ftest_assert_ok(ferry__node_sync(a2));
	tt_proc_signal(&a, SIGSTOP);
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res), -ETIMEDOUT);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &id), 0);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id2, &res));
	tt_check(ferry__node_socket(b), &id2, 2u << 20, 10);
	tt_proc_signal(&a, SIGKILL);
	ferry_gcs_client_destroy(c);
	ferry__node_stop(a2);
	ferry__node_stop(b);
	tt_proc_signal(&gcs, SIGTERM);
}

FTEST(source_killed_mid_transfer)
{
	struct tt_proc gcs = tt_gcs_start();
	struct tt_proc a = tt_node_proc_start(gcs.port, "160M", "a");
	struct ferry__node *b = tt_node_start(gcs.port, 160, true, 0);
	struct ferry_gcs_client *c = tt_gcs_client(gcs.port);
	struct ferry__objmgr_result res;
	/* Killed once the copy was created and its bytes are streaming (mid-transfer). */
	struct tt_killer k = {.watch = ferry__node_objmgr(b), .victim = a.pid};
	struct ferry_object_id id;
	int ret;

	ferry_object_id_random(&id);
	tt_put(a.socket, &id, 64u << 20, 11);
	tt_wait_location(c, &id, 1);
	tt_killer_start(&k);
	ret = ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res);
	tt_killer_join(&k);
	tt_check_killed_pull(ret, b, &id, 64u << 20, 11);
	ferry_gcs_client_destroy(c);
	ferry__node_stop(b);
	tt_proc_signal(&gcs, SIGTERM);
}

/* A plain client's get on B of an object that only A has: the store's miss hook pulls it. */
FTEST(local_get_pulls)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_plasma_client *cb = NULL;
	struct ferry_plasma_view v;
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 100000, 12);
	ftest_assert_ok(ferry__node_sync(a));
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(b), NULL, &cb));
	ftest_assert_ok(ferry_plasma_client_get(cb, &id, 1, 10000, &v));
	ftest_assert_uint_eq(v.data_size, 100000);
	ftest_assert_ok(ferry_plasma_client_release(cb, &v));
	ferry_plasma_client_disconnect(cb);
	tt_check(ferry__node_socket(b), &id, 100000, 12);
	tt_cluster_stop(&t);
}

/* The directory's place of @id's only copy, once it is not @not (alloc): 10 s at most. */
static struct ferry_gcs_object_place listed_place(struct ferry_gcs_client *c,
						  const struct ferry_object_id *id, uint64_t not )
{
	struct ferry_gcs_object_place p = {0};

	for (int i = 0; i < 1000; i++) {
		struct ferry_gcs_object_info info;

		int ret = ferry_gcs_object_lookup(c, id, &info);

		if (ret != -ENOENT) { /* not listed yet */
			ftest_assert_ok(ret);
			if (info.nlocations == 1 && info.places)
				p = info.places[0];
			ferry_gcs_free(info.locations);
		}
		if (p.alloc && p.alloc != not )
			return p;
		usleep(10000);
	}
	FTEST__FAIL("the directory never listed a new place for the copy");
}

/*
 * The directory lists where a copy lies in its store (RDMA pullers READ there before the
 * source answers), and follows it: a primary spilled and read back to new memory is listed
 * at its new place, with a new placement id, where the store's own view finds it.
 */
FTEST(a_copy_read_back_from_spill_is_listed_at_its_new_place)
{
	struct ferry_gcs_object_place before, after;
	struct ferry_plasma_client *pc = NULL;
	struct ferry_gcs_client *c;
	struct ferry_plasma_view v;
	struct ferry_object_id id;
	uint64_t offset, alloc, freed;
	struct tt_cluster t;

	tt_node_spill_dir = ftest_tmpdir();
	t = tt_cluster_start(1, 32, true, 0);
	tt_node_spill_dir = NULL;
	c = tt_cluster_client(&t);
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(t.node[0]), &id, 1u << 20, 61);
	before = listed_place(c, &id, 0);
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(t.node[0]), NULL, &pc));
	ftest_assert_int_ge(ferry_plasma_client_evict(pc, 32u << 20, &freed), 1); /* spilled */
	ftest_assert_ok(ferry_plasma_client_get(pc, &id, 1, 10000, &v));	  /* read back */
	ftest_assert_ok(ferry__plasma_client_view_place(pc, &v, &offset, &alloc));
	ftest_assert_true(alloc != before.alloc);
	after = listed_place(c, &id, before.alloc);
	ftest_assert_uint_eq(after.alloc, alloc);
	ftest_assert_uint_eq(after.offset, offset);
	ftest_assert_ok(ferry_plasma_client_release(pc, &v));
	ferry_plasma_client_disconnect(pc);
	tt_check(ferry__node_socket(t.node[0]), &id, 1u << 20, 61);
	tt_cluster_stop(&t);
}

/*
 * A node serves a spilled copy to a peer: its object manager answers pulls on the node's loop,
 * the store's own, where the store reads the object back (a request to the store through its
 * socket from there would never be answered: the pull times out). A small object (its reply
 * carries it) and a large one (streamed).
 */
FTEST(a_spilled_copy_is_served_to_a_peer)
{
	static const uint64_t sizes[2] = {1000, 4u << 20};
	struct ferry_plasma_client *pc = NULL;
	struct ferry_object_id ids[2];
	struct ferry_plasma_stats st;
	struct ferry_gcs_client *c;
	struct tt_cluster t;
	struct ferry__node *b;
	uint64_t freed;

	tt_node_spill_dir = ftest_tmpdir();
	t = tt_cluster_start(1, 32, true, 5000);
	tt_node_spill_dir = NULL;
	b = tt_cluster_add(&t, 32, 5000);
	c = tt_cluster_client(&t);
	for (int i = 0; i < 2; i++) {
		ferry_object_id_random(&ids[i]);
		tt_put(ferry__node_socket(t.node[0]), &ids[i], sizes[i], 70 + i);
	}
	ftest_assert_ok(ferry__node_sync(t.node[0]));
	for (int i = 0; i < 2; i++)
		tt_wait_location(c, &ids[i], 1);
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(t.node[0]), NULL, &pc));
	ftest_assert_int_ge(ferry_plasma_client_evict(pc, 32u << 20, &freed), 1);
	ftest_assert_ok(ferry_plasma_client_stats(pc, &st));
	ftest_assert_uint_eq(st.spilled_objects, 2);
	for (int i = 0; i < 2; i++) {
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &ids[i], NULL));
		tt_check(ferry__node_socket(b), &ids[i], sizes[i], 70 + i);
	}
	ftest_assert_uint_ge(tt_stats(t.node[0]).requests_served, 2);
	ferry_plasma_client_disconnect(pc);
	tt_cluster_stop(&t);
}

/* @id's only listed place (waited for) checked against what the store at @socket holds: the
 * hash of its data + metadata when those fit FERRY_GCS_CHECK_MAX, else no check. */
static void expect_listed_check(struct ferry_gcs_client *c, const char *socket,
				const struct ferry_object_id *id)
{
	struct ferry_gcs_object_place p = listed_place(c, id, 0);
	struct ferry_plasma_client *pc = NULL;
	struct ferry_plasma_view v;
	uint64_t total;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &pc));
	ftest_assert_ok(ferry_plasma_client_get(pc, id, 1, 10000, &v));
	total = v.data_size + v.metadata_size;
	ftest_assert_uint_eq(p.check,
			     total <= FERRY_GCS_CHECK_MAX ? ferry__hash_content(v.data, total) : 0);
	ftest_assert_ok(ferry_plasma_client_release(pc, &v));
	ferry_plasma_client_disconnect(pc);
}

/*
 * A small object's place carries the hash of its bytes (an RDMA puller READs them without
 * asking and checks them by it: objmgr_rdma.c), computed by the node's store at the seal; a
 * large one's none. Up to the limit exactly (data + metadata), and one byte over.
 */
FTEST(small_objects_are_listed_with_a_content_check)
{
	static const uint64_t sizes[] = {1, 4096, FERRY_GCS_CHECK_MAX - 3, FERRY_GCS_CHECK_MAX - 2,
					 1u << 20};
	struct ferry_gcs_client *c;
	struct ferry_object_id id;
	struct tt_cluster t;

	/* auto: a node that may serve RDMA (none on this host: it serves TCP) */
	t = tt_cluster_start_ex(1, 32, true, 0, FERRY__NODE_TRANSPORT_AUTO, NULL);
	c = tt_cluster_client(&t);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		ferry_object_id_random(&id);
		tt_put(ferry__node_socket(t.node[0]), &id, sizes[k], 70 + k); /* + 3 metadata */
		expect_listed_check(c, ferry__node_socket(t.node[0]), &id);
	}
	tt_cluster_stop(&t);
}

/* The node address decoder: what nodes advertise parses back; anything off is refused. */
FTEST(node_address_strict)
{
	static const char *const bad[] = {
		"",
		"ip=10.0.0.1;host=ab",			 /* no transport */
		"tcp=7;host=ab",			 /* no ip */
		"ip=10.0.0.1;tcp=7",			 /* no host */
		"ip=10.0.0.1;tcp=7;host=ab;",		 /* trailing ';' */
		"ip=10.0.0.1;tcp=0;host=ab",		 /* port 0 */
		"ip=10.0.0.1;tcp=65536;host=ab",	 /* port range */
		"ip=10.0.0.1;tcp=07;host=ab",		 /* leading zero */
		"ip=10.0.0.1;tcp=7;tcp=8;host=ab",	 /* repeated key */
		"ip=host.example;tcp=7;host=ab",	 /* not numeric */
		"ip=10.0.0.1;shm=relative.sock;host=ab", /* relative path */
		"ip=10.0.0.1;shm=/a b;host=ab",		 /* space in path */
		"ip=10.0.0.1;tcp=7;host=zz",		 /* not a boot id */
		"ip=10.0.0.1;tcp=7;host=ab;color=red",	 /* unknown key */
		"ip=10.0.0.1;tcp=7;;host=ab",		 /* empty pair */
		"ip=10.0.0.1;tcp=7;host",		 /* no '=' */
	};
	struct ferry__node_addr a, b;
	char text[FERRY__NODE_ADDR_MAX];
	const char *good = "host=0b6e-AF;shm=/run/f/plasma.sock;ip=::1;rdma=7002;tcp=7001";
	int n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ftest_assert_errno(ferry__node_addr_parse(bad[i], strlen(bad[i]), &a), -EINVAL);
	ftest_assert_ok(ferry__node_addr_parse(good, strlen(good), &a));
	ftest_assert_str_eq(a.ip, "::1");
	ftest_assert_uint_eq(a.tcp_port, 7001);
	ftest_assert_uint_eq(a.rdma_port, 7002);
	ftest_assert_str_eq(a.shm_path, "/run/f/plasma.sock");
	ftest_assert_uint_eq(ferry__node_addr_transports(&a), FERRY_GCS_TRANSPORT_ALL);
	n = ferry__node_addr_format(&a, text, sizeof(text));
	ftest_assert_int_gt(n, 0);
	ftest_assert_ok(ferry__node_addr_parse(text, (size_t)n, &b));
	ftest_assert_mem_eq(&a, &b, sizeof(a));
	ftest_assert_errno(ferry__node_addr_format(&a, text, 20), -ENOSPC);
	/* Embedded NULs are not part of any valid address. */
	ftest_assert_errno(ferry__node_addr_parse("ip=1.2.3.4\0;tcp=1;host=a", 24, &a), -EINVAL);
}

/* A store in a child process (the allocation countdown is per process: only our side fails). */
static pid_t store_child(const char *sock)
{
	struct ferry_plasma_client *c = NULL;
	pid_t pid = fork();

	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct ferry__plasma_server_opts so = {0};
		struct ferry__plasma_server *srv = NULL;

		so.socket_path = sock;
		so.memory_bytes = 64u << 20;
		so.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT;
		if (ferry__plasma_server_start_new(&so, &srv) < 0)
			_exit(1);
		pause();
		_exit(0);
	}
	{
		struct ferry_plasma_connect_opts co = {.wait_ms = 10000};

		ftest_assert_ok(ferry_plasma_client_connect(sock, &co, &c));
		ferry_plasma_client_disconnect(c);
	}
	return pid;
}

/* Every allocation of create (and the pulls' threads' start-up) failing in turn: each ends in
 * an error with nothing leaked (the harness checks), then one succeeds. */
FTEST(objmgr_create_alloc_failures)
{
	struct ferry__objmgr_opts oo = {0};
	struct ferry__objmgr *om = NULL;
	char sock[256];
	int ret = -ENOMEM, status;
	pid_t store;
	long n;

	snprintf(sock, sizeof(sock), "%s/store.sock", ftest_tmpdir());
	store = store_child(sock);
	oo.store_socket = sock;
	oo.token = TT_TOKEN;
	oo.token_len = strlen(TT_TOKEN);
	ferry_node_id_random(&oo.node_id);
	for (n = 0; n < 2000; n++) {
		bool unused;

		ferry__alloc_fail_after(n);
		ret = ferry__objmgr_create(&oo, &om);
		unused = ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		if (ret == 0 && unused)
			break;	/* every allocation of create was failed once */
		if (ret == 0) { /* the failure hit another thread (the store's, a pull thread) */
			ferry__objmgr_destroy(om);
			continue;
		}
		ftest_assert_true(ret == -ENOMEM || ret == -ECONNRESET || ret == -EPROTO);
	}
	ftest_assert_ok(ret);
	ftest_log("create succeeded after %ld failed allocations", n);
	ftest_assert_uint_ne(ferry__objmgr_port(om), 0);
	ferry__objmgr_destroy(om);
	kill(store, SIGTERM);
	waitpid(store, &status, 0);
}

/* ferry-node: its ready line names a usable address; SIGTERM stops it with status 0 and
 * leaves no store socket behind. */
FTEST(node_process_stops_clean)
{
	struct tt_proc gcs = tt_gcs_start();
	struct tt_proc a = tt_node_proc_start(gcs.port, "64M", "a");
	struct ferry__node_addr addr;

	ftest_assert_ok(ferry__node_addr_parse(a.address, strlen(a.address), &addr));
	ftest_assert_uint_ne(addr.tcp_port, 0);
	ftest_assert_str_eq(addr.shm_path, a.socket);
	ftest_assert_int_eq(access(a.socket, F_OK), 0);
	tt_proc_signal(&a, SIGTERM);
	ftest_assert_int_eq(access(a.socket, F_OK), -1);
	tt_proc_signal(&gcs, SIGTERM);
}

/* The threads of @pid whose name is @name (NULL: all), and its io_uring fds into *@rings. */
static unsigned count_threads(pid_t pid, const char *name, unsigned *rings)
{
	char path[320], comm[32], link[64];
	unsigned n = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	ftest_assert_ptr_notnull(d);
	while ((e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		f = fopen(path, "re");
		if (!f)
			continue; /* gone meanwhile */
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		n += !name || strcmp(comm, name) == 0;
	}
	closedir(d);
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	ftest_assert_ptr_notnull(d);
	*rings = 0;
	while ((e = readdir(d))) {
		char fd[600];
		ssize_t len;

		snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
		len = readlink(fd, link, sizeof(link) - 1);
		if (len > 0) {
			link[len] = '\0';
			*rings += strstr(link, "io_uring") != NULL;
		}
	}
	closedir(d);
	return n;
}

/*
 * An idle ferry-node serves the GCS client, its heartbeats, its directory updates, the plasma
 * store and (on a host without RDMA) the object manager on one loop thread of its own (issue
 * 22): no GCS client, heartbeat, directory, store or object manager thread, and no pull thread
 * (they start with pulls): main and its loop, one ring. With --objmgr-loop own (auto's choice
 * on a node that serves RDMA) the object manager has a loop of its own: 3 threads, 2 rings.
 * (The node had 10 threads and 3 rings before issue 22.) The node must still beat: alive in the
 * GCS, its load reported by its first beat.
 */
FTEST(idle_node_threads_and_rings)
{
	struct tt_proc gcs = tt_gcs_start(), a, b;
	struct ferry_gcs_client *c = tt_gcs_client(gcs.port);
	struct ferry_gcs_node_info *nodes = NULL;
	struct ferry_gcs_node_load *loads = NULL;
	unsigned rings, total;
	int n;

	tt_node_objmgr_loop = "node"; /* also when the suite runs with FERRY_TEST_OBJMGR_LOOP */
	a = tt_node_proc_start(gcs.port, "64M", "a");

	usleep(500 * 1000); /* several beats (100 ms each) */
	ftest_assert_uint_eq(count_threads(a.pid, "ferry-gcs-cli", &rings), 0);
	ftest_assert_uint_eq(count_threads(a.pid, "ferry-heartbeat", &rings), 0);
	ftest_assert_uint_eq(count_threads(a.pid, "ferry-directory", &rings), 0);
	ftest_assert_uint_eq(count_threads(a.pid, "ferry-store", &rings), 0);
	ftest_assert_uint_eq(count_threads(a.pid, "ferry-om-pull", &rings), 0);
	ftest_assert_uint_eq(count_threads(a.pid, "ferry-om-loop", &rings), 0);
	total = count_threads(a.pid, NULL, &rings);
	ftest_log("ferry-node: %u threads, %u io_uring fds", total, rings);
	/* main and ferry-node-loop */
	ftest_assert_uint_le(total, 2 + ITEST_SANITIZER_THREADS);
	ftest_assert_uint_eq(rings, 1); /* no spill directory: no disk helper's ring either */
	n = ferry_gcs_node_list(c, &nodes);
	ftest_assert_int_eq(n, 1);
	ftest_assert_int_eq(nodes[0].state, FERRY_GCS_NODE_ALIVE);
	ferry_gcs_free(nodes);
	/* The first beat carries the load (a report, sent from the loop). */
	n = ferry_gcs_node_load_list(c, &loads);
	ftest_assert_int_eq(n, 1);
	ftest_assert_uint_gt(loads[0].nresources, 0);
	ferry_gcs_free(loads);
	/* With a spill directory (as `ferry start` gives every node): one more ring, the disk
	 * helper's, and no more threads while nothing is spilled or read back. */
	tt_node_spill_dir = ftest_tmpdir();
	b = tt_node_proc_start(gcs.port, "64M", "b");
	tt_node_spill_dir = NULL;
	tt_node_objmgr_loop = NULL;
	usleep(300 * 1000);
	total = count_threads(b.pid, NULL, &rings);
	ftest_log("ferry-node --spill-dir: %u threads, %u io_uring fds", total, rings);
	ftest_assert_uint_le(total, 2 + ITEST_SANITIZER_THREADS);
	ftest_assert_uint_le(rings, 2);
	tt_proc_signal(&b, SIGTERM);
	/* The object manager on a loop of its own: one more thread and ring. */
	tt_node_objmgr_loop = "own";
	b = tt_node_proc_start(gcs.port, "64M", "c");
	tt_node_objmgr_loop = NULL;
	usleep(300 * 1000);
	ftest_assert_uint_eq(count_threads(b.pid, "ferry-om-loop", &rings), 1);
	total = count_threads(b.pid, NULL, &rings);
	ftest_log("ferry-node --objmgr-loop own: %u threads, %u io_uring fds", total, rings);
	ftest_assert_uint_le(total, 3 + ITEST_SANITIZER_THREADS);
	ftest_assert_uint_eq(rings, 2);
	tt_proc_signal(&b, SIGTERM);
	ferry_gcs_client_destroy(c);
	tt_proc_signal(&a, SIGTERM);
	tt_proc_signal(&gcs, SIGTERM);
}

/*
 * The object manager's pull threads start when pulls queue and leave after thread_idle_ms (2 s
 * by default) without work, so an idle node runs none; a pull after they left starts them again
 * and completes. Fails if the threads start with the node, if they stay after the pulls, or if
 * a pull once they left does not complete. A 1 MiB TCP pull runs on a pull thread (only small
 * objects end on the loop's fast path).
 */
FTEST(pull_threads_come_and_go)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry_object_id id;
	unsigned rings, n;

	ftest_assert_uint_eq(count_threads(getpid(), "ferry-om-pull", &rings), 0);
	for (int round = 0; round < 2; round++) {
		ferry_object_id_random(&id);
		tt_put(ferry__node_socket(a), &id, 1u << 20, 31 + round);
		ftest_assert_ok(ferry__node_sync(a));
		tt_wait_location(c, &id, 1);
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL));
		ftest_assert_int_eq(tt_present(ferry__node_socket(b), &id), 1);
		ftest_assert_uint_ge(count_threads(getpid(), "ferry-om-pull", &rings), 1);
		/* A bound on behaviour, not on speed: they leave 2 s after the pull; 20 s allowed. */
		for (int i = 0; i < 200; i++) {
			n = count_threads(getpid(), "ferry-om-pull", &rings);
			if (!n)
				break;
			usleep(100 * 1000);
		}
		ftest_log("round %d: pull threads gone after the pull", round);
		ftest_assert_uint_eq(n, 0);
	}
	tt_cluster_stop(&t);
}

static struct ferry__node *g_gone_node;		  /* whose copy the hook deletes */
static struct ferry_plasma_client *g_gone_client; /* a client of its store */

/* Delete the copy the moment it is sealed, and let the node apply the removal. */
static void delete_when_sealed(struct ferry__objmgr *om, const struct ferry_object_id *id)
{
	(void)om;
	ftest_assert_ok(ferry_plasma_client_delete(g_gone_client, id, 1, NULL));
	ftest_assert_ok(ferry__node_sync(g_gone_node));
}

/*
 * A pulled copy that leaves the store before anyone recorded it (a caller's delete, an
 * eviction, or a delete the store read before the seal notice) must not stay listed. The
 * object manager used to record the copy in the GCS itself, beside the store's event stream,
 * after the node had already applied the removal: B stayed listed for good (the stale entry
 * seen in bench runs). Records now follow the store's events in order.
 */
FTEST(copy_gone_before_record_unlisted)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry_object_id id;

	for (uint64_t size = 8; size <= 4096; size *= 512) {
		ferry_object_id_random(&id);
		tt_put(ferry__node_socket(a), &id, size, 21);
		ftest_assert_ok(ferry__node_sync(a));
		tt_wait_location(c, &id, 1);
		ftest_assert_ok(
			ferry_plasma_client_connect(ferry__node_socket(b), NULL, &g_gone_client));
		g_gone_node = b;
		ferry__objmgr_sealed_hook = delete_when_sealed;
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL));
		ferry__objmgr_sealed_hook = NULL;
		ftest_assert_int_eq(tt_present(ferry__node_socket(b), &id), 0);
		/* Whatever is still queued lands now; a record after the removal would stay. */
		for (int i = 0; i < 20; i++) {
			ftest_assert_ok(ferry__node_sync(b));
			ftest_assert_int_eq(tt_listed(c, &id, ferry__node_id(b), 0, 0), 0);
			usleep(5 * 1000);
		}
		ferry_plasma_client_disconnect(g_gone_client);
	}
	tt_cluster_stop(&t);
}

static atomic_uint g_deltas; /* changes published for one record */

static void count_deltas(void *arg, const struct ferry_gcs_event *ev)
{
	(void)arg;
	if (ev->kind == FERRY_GCS_EVENT_DELTA)
		atomic_fetch_add(&g_deltas, 1);
}

/* The directory thread gathers pulled copies (copy_batch_us, here the most: 1 s) and sends a
 * primary at once, together with what queued before it; ferry__node_sync() sends everything.
 * A copy removed while its record still waits is taken back with the removal: neither goes.
 * Fails if copies go one by one (listed within 300 ms), if a primary waits for the window (not
 * listed within 500 ms), if a copy sent behind its removal stays listed, or if a copy and its
 * removal reach the GCS (a subscriber of the record sees the changes). */
FTEST(copy_records_gathered_primaries_at_once)
{
	struct tt_cluster t;
	struct ferry__node *a, *b;
	struct ferry_plasma_client *cb = NULL;
	struct ferry_gcs_client *c;
	struct ferry_object_id x, y, z, w;

	tt_node_copy_batch_us = 1000000; /* the nodes read it as they start */
	t = tt_cluster_start(2, 64, true, 0);
	tt_node_copy_batch_us = 0;
	a = t.node[0], b = t.node[1];
	c = tt_cluster_client(&t);
	ferry_object_id_random(&x);
	ferry_object_id_random(&y);
	ferry_object_id_random(&z);
	ferry_object_id_random(&w);
	tt_put(ferry__node_socket(a), &x, 64, 1);
	tt_put(ferry__node_socket(a), &z, 64, 2);
	ftest_assert_int_eq(tt_listed(c, &x, ferry__node_id(a), 0, 500), 1);
	ftest_assert_int_eq(tt_listed(c, &z, ferry__node_id(a), 0, 500), 1);
	/* A pulled copy waits for company: unlisted 300 ms after the pull. */
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &x, NULL));
	ftest_assert_int_eq(tt_listed(c, &x, ferry__node_id(b), 0, 300), 0);
	/* A primary on b goes at once and takes the copy queued before it along. */
	tt_put(ferry__node_socket(b), &y, 64, 3);
	ftest_assert_int_eq(tt_listed(c, &y, ferry__node_id(b), 0, 500), 1);
	ftest_assert_int_eq(tt_listed(c, &x, ferry__node_id(b), 0, 0), 1);
	/* A copy and its removal, gathered together: taken back, nothing reaches the GCS. */
	ftest_assert_ok(ferry_gcs_subscribe(c, FERRY_GCS_CH_OBJECT_LOCATIONS, z.bytes,
					    sizeof(z.bytes), count_deltas, NULL));
	atomic_store(&g_deltas, 0);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &z, NULL));
	/* The store hears of the copy (its seal notice may be held back 1 ms) before the delete:
	 * else it announces neither. */
	ftest_assert_ok(ferry__objmgr_flush_notices(ferry__node_objmgr(b)));
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(b), NULL, &cb));
	ftest_assert_ok(ferry_plasma_client_delete(cb, &z, 1, NULL));
	ferry_plasma_client_disconnect(cb);
	ftest_assert_ok(ferry__node_sync(b));
	ftest_assert_int_eq(tt_listed(c, &z, ferry__node_id(b), 0, 0), 0);
	ftest_assert_int_eq(tt_listed(c, &z, ferry__node_id(a), 0, 0), 1);
	usleep(100 * 1000); /* a publication would be here by now */
	ftest_assert_uint_eq(atomic_load(&g_deltas), 0);
	/* The window of the copy taken back ends with nothing queued; the thread goes on. */
	usleep(1000 * 1000);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &x, NULL));
	tt_put(ferry__node_socket(a), &w, 64, 4);
	ftest_assert_ok(ferry__node_sync(a));
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &w, NULL));
	ftest_assert_ok(ferry__node_sync(b));
	ftest_assert_int_eq(tt_listed(c, &w, ferry__node_id(b), 0, 0), 1);
	tt_cluster_stop(&t);
}
