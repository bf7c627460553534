/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A get on one node of an object put on another waits for it as a get on one node does
 * (issue 21): producer first (put, then at once a get elsewhere) and consumer first (the get
 * parks, the put comes later), across two and three nodes, many rounds, zero timeouts. The
 * round counts scale with FERRY_TEST_WAIT_ROUNDS (the slow suite runs more).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/wire.h"
#include "gcs/client.h"
#include "tests/harness/ftest.h"
#include "tests/integration/transport/transport_util.h"
#include "transport/objmgr_int.h"

/* A get's deadline: a hang guard far above any honest wait here. */
#define GET_TIMEOUT_MS 20000

/* FERRY_TEST_WAIT_DIVISOR: the ThreadSanitizer build (10x slower) runs a part of each count. */
static unsigned rounds(unsigned base)
{
	const char *s = getenv("FERRY_TEST_WAIT_ROUNDS"), *d = getenv("FERRY_TEST_WAIT_DIVISOR");

	if (s && atoi(s) > 0)
		return (unsigned)atoi(s);
	return d && atoi(d) > 0 ? base / (unsigned)atoi(d) : base;
}

/* Objects alternate 64 KiB and 1 MiB (the sizes). */
static uint64_t size_of(unsigned round)
{
	return round % 2 ? 1u << 20 : 64u << 10;
}

/* A get of @id on the store at @socket with @timeout_ms: its status (the view is checked and
 * released on success). */
static int get_one(const char *socket, const struct ferry_object_id *id, uint64_t size,
		   int64_t timeout_ms)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_view v;
	int ret;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ret = ferry_plasma_client_get(c, id, 1, timeout_ms, &v);
	if (ret == 0) {
		ftest_assert_uint_eq(v.data_size, size);
		ftest_assert_ok(ferry_plasma_client_release(c, &v));
	}
	ferry_plasma_client_disconnect(c);
	return ret;
}

/* Delete @id on every node (the stores stay small over thousands of rounds). */
static void drop_everywhere(struct tt_cluster *t, unsigned nodes, const struct ferry_object_id *id)
{
	for (unsigned i = 0; i < nodes; i++) {
		struct ferry_plasma_client *c = NULL;
		int status;

		ftest_assert_ok(
			ferry_plasma_client_connect(ferry__node_socket(t->node[i]), NULL, &c));
		(void)ferry_plasma_client_delete(c, id, 1, &status);
		ferry_plasma_client_disconnect(c);
	}
}

struct getter {
	const char *socket;	   /* the consumer's store */
	struct ferry_object_id id; /* what it gets */
	uint64_t size;		   /* its bytes */
	int status;		   /* the get's */
	pthread_t thread;	   /* runs it */
};

static void *getter_main(void *arg)
{
	struct getter *g = arg;

	g->status = get_one(g->socket, &g->id, g->size, GET_TIMEOUT_MS);
	return NULL;
}

/*
 * @n rounds on nodes @t->node[0..@nodes): each round puts an object on one node (taking
 * turns) and gets it on every other node; producer first: the gets start right after the
 * seal; consumer first: the gets are parked before the put (0-3 ms earlier). Every get
 * succeeds and every copy is byte-exact.
 */
static void run_rounds(struct tt_cluster *t, unsigned nodes, unsigned n, bool consumer_first)
{
	struct getter g[TT_MAX_NODES];

	for (unsigned r = 0; r < n; r++) {
		unsigned src = r % nodes, k = 0;
		uint64_t size = size_of(r);
		struct ferry_object_id id;

		ferry_object_id_random(&id);
		if (!consumer_first)
			tt_put(ferry__node_socket(t->node[src]), &id, size, r);
		for (unsigned i = 0; i < nodes; i++) {
			if (i == src)
				continue;
			g[k] = (struct getter){
				.socket = ferry__node_socket(t->node[i]), .id = id, .size = size};
			ftest_assert_int_eq(pthread_create(&g[k].thread, NULL, getter_main, &g[k]),
					    0);
			k++;
		}
		if (consumer_first) {
			usleep(r % 4 * 1000);
			tt_put(ferry__node_socket(t->node[src]), &id, size, r);
		}
		for (unsigned i = 0; i < k; i++) {
			pthread_join(g[i].thread, NULL);
			if (g[i].status != 0)
				ftest_log("round %u: get on %s: %d", r, g[i].socket, g[i].status);
			ftest_assert_ok(g[i].status);
			tt_check(g[i].socket, &id, size, r);
		}
		drop_everywhere(t, nodes, &id);
	}
}

FTEST(two_nodes_producer_first)
{
	struct tt_cluster t = tt_cluster_start(2, 96, true, 0);

	run_rounds(&t, 2, rounds(600), false);
	tt_cluster_stop(&t);
}

FTEST(two_nodes_consumer_first)
{
	struct tt_cluster t = tt_cluster_start(2, 96, true, 0);

	run_rounds(&t, 2, rounds(600), true);
	tt_cluster_stop(&t);
}

/* Three nodes, shm between them (one host): two consumers of each object. */
FTEST(three_nodes_producer_first)
{
	struct tt_cluster t = tt_cluster_start(3, 96, false, 0);

	run_rounds(&t, 3, rounds(400), false);
	tt_cluster_stop(&t);
}

FTEST(three_nodes_consumer_first)
{
	struct tt_cluster t = tt_cluster_start(3, 96, true, 0);

	run_rounds(&t, 3, rounds(400), true);
	tt_cluster_stop(&t);
}

/*
 * The long form: the consumer retries a short get every 200 ms and the put comes a
 * second later (a whole miss episode with waits coming and going), then a get with a long
 * deadline is parked 1.2 s before its put.
 */
FTEST(consumer_retries_then_long_wait)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	const char *a = ferry__node_socket(t.node[0]), *b = ferry__node_socket(t.node[1]);
	struct ferry_object_id id;
	struct getter g;
	int ret = -1;

	ferry_object_id_random(&id);
	for (int i = 0; i < 5; i++)
		ftest_assert_errno(get_one(b, &id, 4096, 200), -ETIMEDOUT);
	tt_put(a, &id, 4096, 1);
	for (int i = 0; i < 10 && ret != 0; i++)
		ret = get_one(b, &id, 4096, 500);
	ftest_assert_ok(ret);
	g = (struct getter){.socket = b, .size = 8192};
	ferry_object_id_random(&g.id);
	ftest_assert_int_eq(pthread_create(&g.thread, NULL, getter_main, &g), 0);
	usleep(1200 * 1000);
	tt_put(a, &g.id, 8192, 2);
	pthread_join(g.thread, NULL);
	ftest_assert_ok(g.status);
	tt_cluster_stop(&t);
}

/*
 * A node killed and started again at the same store socket path, as `ferry start` or a
 * service manager would (a new node id, a new port): a peer that pulled from the old one pulls
 * the new one's objects, over shm (@no_shm false: one host) or TCP, three restarts in a row.
 */
static void restarted_at_same_path(bool no_shm)
{
	struct tt_proc gcs = tt_gcs_start();
	struct tt_proc a = tt_node_proc_start(gcs.port, "64M", "a");
	struct ferry__node *b = tt_node_start(gcs.port, 64, no_shm, 0);

	for (unsigned r = 0; r < 4; r++) {
		struct ferry_object_id id;

		ferry_object_id_random(&id);
		tt_put(a.socket, &id, 100000, r);
		ftest_assert_ok(get_one(ferry__node_socket(b), &id, 100000, 10000));
		tt_check(ferry__node_socket(b), &id, 100000, r);
		tt_proc_signal(&a, SIGKILL);
		if (r % 2)
			usleep(300 * 1000); /* a while later, or at once */
		a = tt_node_proc_start(gcs.port, "64M", "a");
	}
	tt_proc_signal(&a, SIGKILL);
	ferry__node_stop(b);
	tt_proc_signal(&gcs, SIGTERM);
}

FTEST(restarted_node_same_path_shm)
{
	restarted_at_same_path(false);
}

FTEST(restarted_node_same_path_tcp)
{
	restarted_at_same_path(true);
}

/* The address's run id (a node's start): strict, optional, and it formats back. */
FTEST(address_run_id)
{
	static const char *const bad[] = {
		"ip=10.0.0.1;tcp=7;host=ab;run=0",		   /* zero: not a run */
		"ip=10.0.0.1;tcp=7;host=ab;run=",		   /* empty */
		"ip=10.0.0.1;tcp=7;host=ab;run=12345678901234567", /* 17 digits */
		"ip=10.0.0.1;tcp=7;host=ab;run=ABC",		   /* upper case */
		"ip=10.0.0.1;tcp=7;host=ab;run=1;run=2",	   /* repeated */
	};
	const char *good = "run=00c0ffee;ip=10.0.0.1;tcp=7;host=ab";
	struct ferry__node_addr a, b;
	char text[FERRY__NODE_ADDR_MAX];
	int n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ftest_assert_errno(ferry__node_addr_parse(bad[i], strlen(bad[i]), &a), -EINVAL);
	ftest_assert_ok(ferry__node_addr_parse(good, strlen(good), &a));
	ftest_assert_uint_eq(a.run, 0xc0ffee);
	n = ferry__node_addr_format(&a, text, sizeof(text));
	ftest_assert_int_gt(n, 0);
	ftest_assert_ok(ferry__node_addr_parse(text, (size_t)n, &b));
	ftest_assert_mem_eq(&a, &b, sizeof(a));
	/* Without it (an older node's address): 0, and nothing is added. */
	ftest_assert_ok(ferry__node_addr_parse(good + 13, strlen(good + 13), &a));
	ftest_assert_uint_eq(a.run, 0);
	n = ferry__node_addr_format(&a, text, sizeof(text));
	ftest_assert_ptr_null(strstr(text, "run="));
}

/* Kills @victim @delay_ms after @watch started a pull beyond @started (its count before). */
struct killer {
	struct ferry__objmgr *watch; /* the puller */
	uint64_t started;	     /* its pulls_started before the get */
	pid_t victim;		     /* the source */
	unsigned delay_ms;	     /* after the pull's start */
	pthread_t thread;	     /* runs it */
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	struct ferry__objmgr_stats st;

	for (int i = 0; i < 100000; i++) { /* 20 s at most: a hang guard */
		ferry__objmgr_get_stats(k->watch, &st);
		if (st.pulls_started > k->started)
			break;
		usleep(200);
	}
	usleep(k->delay_ms * 1000u);
	kill(k->victim, SIGKILL);
	return NULL;
}

/*
 * The failover case: a large object on A (a ferry-node process, started again at the
 * same store path each round, as `ferry start` does) and a complete copy on D; a get on C with
 * a 5 s deadline while A is SIGKILLed 0-20 ms into C's pull. Every get succeeds from D,
 * byte-exact. C and D pull over shm or (@no_shm) TCP. Under FERRY_TEST_WAIT_ROUNDS (the slow
 * suite): 100 rounds (FERRY_TEST_WAIT_KILLS) of 64 MiB; else 30 of 16 MiB.
 */
static void source_killed(bool no_shm)
{
	struct tt_proc gcs = tt_gcs_start();
	struct ferry__node *d = tt_node_start(gcs.port, 160, no_shm, 0);
	struct ferry__node *c = tt_node_start(gcs.port, 160, no_shm, 0);
	struct ferry_gcs_client *gc = tt_gcs_client(gcs.port);
	const bool slow = getenv("FERRY_TEST_WAIT_ROUNDS") != NULL;
	const uint64_t size = slow ? 64u << 20 : 16u << 20;
	const char *kills = getenv("FERRY_TEST_WAIT_KILLS");
	const unsigned n = kills && atoi(kills) > 0 ? (unsigned)atoi(kills) : slow ? 100 : 30;

	for (unsigned r = 0; r < n; r++) {
		struct tt_proc a = tt_node_proc_start(gcs.port, "160M", "a");
		struct ferry__objmgr_stats st;
		struct killer k = {
			.watch = ferry__node_objmgr(c), .victim = a.pid, .delay_ms = r % 21};
		struct ferry_object_id id;

		ferry_object_id_random(&id);
		tt_put(a.socket, &id, size, r);
		tt_wait_location(gc, &id, 1);
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(d), &id, NULL));
		ftest_assert_ok(ferry__node_sync(d));
		tt_wait_location(gc, &id, 2);
		ferry__objmgr_get_stats(k.watch, &st);
		k.started = st.pulls_started;
		ftest_assert_int_eq(pthread_create(&k.thread, NULL, killer_main, &k), 0);
		ftest_assert_ok(get_one(ferry__node_socket(c), &id, size, 5000));
		pthread_join(k.thread, NULL);
		tt_check(ferry__node_socket(c), &id, size, r);
		a.pid = waitpid(a.pid, NULL, 0) == a.pid ? 0 : a.pid;
		ftest_assert_int_eq(a.pid, 0);
		drop_everywhere(&(struct tt_cluster){.node = {d, c}}, 2, &id);
		if (r % 20 == 19)
			ftest_log("%u rounds", r + 1);
	}
	ferry_gcs_client_destroy(gc);
	ferry__node_stop(c);
	ferry__node_stop(d);
	tt_proc_signal(&gcs, SIGTERM);
}

FTEST(source_killed_with_second_copy_shm)
{
	source_killed(false);
}

/* TCP only: the slow suite (it passed before the run ids too; it guards the failover). */
FTEST(source_killed_with_second_copy_tcp)
{
	if (!getenv("FERRY_TEST_WAIT_ROUNDS"))
		ftest_skip("the slow suite runs it (FERRY_TEST_WAIT_ROUNDS)");
	source_killed(true);
}

/* A waiting pull ends once nobody waits: a get that timed out leaves no pull retrying behind
 * (its store's miss episode ends a second later and unwants it). */
FTEST(pull_ends_when_nobody_waits)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__objmgr *om = ferry__node_objmgr(t.node[1]);
	struct ferry__objmgr_stats st;
	struct ferry_object_id id;
	int i;

	ferry_object_id_random(&id);
	ftest_assert_errno(get_one(ferry__node_socket(t.node[1]), &id, 1, 300), -ETIMEDOUT);
	ferry__objmgr_get_stats(om, &st);
	ftest_assert_uint_eq(st.pulls_started, 1);
	ftest_assert_uint_eq(st.pulls_failed, 0);	     /* still waiting for the object */
	for (i = 0; i < 1000 && st.pulls_failed == 0; i++) { /* 10 s at most: a hang guard */
		usleep(10000);
		ferry__objmgr_get_stats(om, &st);
	}
	ftest_assert_uint_eq(st.pulls_failed, 1);
	ftest_assert_uint_eq(st.pulls_ok, 0);
	tt_cluster_stop(&t);
}

/* Poll (10 s at most: a hang guard) until @b follows @n objects. */
static void wait_followed(struct ferry__node *b, uint64_t n)
{
	for (int i = 0; i < 2000 && tt_stats(b).locations_followed < n; i++)
		usleep(5000);
	ftest_assert_uint_eq(tt_stats(b).locations_followed, n);
}

/*
 * Issue 22: a node's location cache follows the objects it pulls, not the whole channel (every
 * node hearing every object's every change is N^2 in a cluster where all pull). B pulls x,
 * then 20 objects are put on A and x gets a third copy: B takes x's change and none of the
 * 20. And a get on B parked before its object is put on A still ends when A puts it: the
 * parked pull's object is followed, and the put's event reaches B.
 */
FTEST(cache_follows_only_pulled_objects)
{
	struct tt_cluster t = tt_cluster_start(3, 64, true, 0);
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry_object_id x, y;
	uint64_t before, taken;
	struct getter g;

	ferry_object_id_random(&x);
	tt_put(ferry__node_socket(a), &x, 16, 1);
	tt_wait_location(c, &x, 1);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &x, NULL));
	tt_wait_cached(ferry__node_objmgr(b), &x, 2, locs); /* B's own copy is listed */
	before = tt_stats(b).location_events;
	for (int i = 0; i < 20; i++) {
		ferry_object_id_random(&y);
		tt_put(ferry__node_socket(a), &y, 16, 2);
		tt_wait_location(c, &y, 1);
	}
	/* After theirs, a change of x (a copy on the third node): once B has it, the events of
	 * the 20 have been sent to B too, if it heard them. */
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(t.node[2]), &x, NULL));
	tt_wait_cached(ferry__node_objmgr(b), &x, 3, locs);
	taken = tt_stats(b).location_events - before;
	ftest_log("location events B took meanwhile: %llu", (unsigned long long)taken);
	ftest_assert_uint_eq(taken, 1);
	ftest_assert_uint_eq(tt_stats(b).locations_followed, 1);

	g = (struct getter){.socket = ferry__node_socket(b), .size = 4096};
	ferry_object_id_random(&g.id);
	ftest_assert_int_eq(pthread_create(&g.thread, NULL, getter_main, &g), 0);
	wait_followed(b, 2); /* the get's pull follows its object (and parks: nothing has it) */
	before = tt_stats(b).location_events;
	tt_put(ferry__node_socket(a), &g.id, 4096, 3);
	pthread_join(g.thread, NULL);
	ftest_assert_ok(g.status);
	tt_check(g.socket, &g.id, 4096, 3);
	ftest_assert_uint_gt(tt_stats(b).location_events, before); /* the put reached B */
	tt_cluster_stop(&t);
}

static struct ferry_gcs_client *_Atomic counted_client; /* whose lookups count */
static atomic_uint lookups_sent;			/* its object lookups */

static void count_lookups(struct ferry_gcs_client *c, uint16_t type)
{
	if (c == atomic_load(&counted_client) && (type == FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP ||
						  type == FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP_BATCH))
		atomic_fetch_add(&lookups_sent, 1);
}

static unsigned lookups(void)
{
	return atomic_load(&lookups_sent);
}

/*
 * Issue 22: the keyed subscription is the lookup. A pull's first look at an object subscribes
 * to it, and the snapshot's end says where it is, or that nobody has it yet: B's GCS client
 * sends no object lookup for a listed object, for one nobody has (the pull fails at once), nor
 * for a get parked before the put (its retries wait for the put's event, not the directory).
 */
FTEST(first_pull_of_an_object_sends_no_lookup)
{
	struct tt_cluster t;
	struct ferry_gcs_client *c;
	struct ferry__node *a, *b;
	struct ferry_object_id x, y;
	struct getter g;

	ferry__gcs_client_send_hook = count_lookups;
	t = tt_cluster_start(2, 64, true, 0);
	c = tt_cluster_client(&t);
	a = t.node[0], b = t.node[1];
	atomic_store(&counted_client, ferry__node_objmgr(b)->opts.gcs);
	ferry_object_id_random(&x);
	tt_put(ferry__node_socket(a), &x, 4096, 1);
	tt_wait_location(c, &x, 1);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &x, NULL));
	tt_check(ferry__node_socket(b), &x, 4096, 1);
	ftest_assert_uint_eq(lookups(), 0);

	ferry_object_id_random(&y);
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &y, NULL), -ENOENT);
	ftest_assert_uint_eq(lookups(), 0);

	g = (struct getter){.socket = ferry__node_socket(b), .size = 4096};
	ferry_object_id_random(&g.id);
	ftest_assert_int_eq(pthread_create(&g.thread, NULL, getter_main, &g), 0);
	wait_followed(b, 3); /* x, y and the get's object: it is parked */
	tt_put(ferry__node_socket(a), &g.id, 4096, 2);
	pthread_join(g.thread, NULL);
	ftest_assert_ok(g.status);
	tt_check(g.socket, &g.id, 4096, 2);
	ftest_log("object lookups sent by B: %u", lookups());
	ftest_assert_uint_eq(lookups(), 0);
	atomic_store(&counted_client, NULL);
	tt_cluster_stop(&t);
}

/* Poll (10 s at most: a hang guard) until the directory lists @id at exactly @n nodes. */
static void wait_listed_exactly(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				uint32_t n)
{
	struct ferry_gcs_object_info info;
	uint32_t have = UINT32_MAX;

	for (int i = 0; i < 2000 && have != n; i++) {
		if (i)
			usleep(5000);
		ftest_assert_ok(ferry_gcs_object_lookup(c, id, &info));
		have = info.nlocations;
		ferry_gcs_free(info.locations);
	}
	ftest_assert_uint_eq(have, n);
}

/*
 * The cache's bound (here 2 objects): B pulls o0, o1, o2; o0, the least recently used, is
 * forgotten and unsubscribed, so B takes none of its changes (its deletion on A), only those
 * of the objects it still follows (o1 copied to a third node).
 */
FTEST(cache_bound_unfollows_least_recent)
{
	struct tt_cluster t;
	struct ferry_gcs_client *c;
	struct ferry__node *a, *b;
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry_object_id o[3];
	struct ferry_plasma_client *pc = NULL;
	uint64_t before, taken;
	int status;

	ferry__objmgr_locs_limit = 2;
	t = tt_cluster_start(3, 64, true, 0);
	c = tt_cluster_client(&t);
	a = t.node[0], b = t.node[1];
	for (int i = 0; i < 3; i++) {
		ferry_object_id_random(&o[i]);
		tt_put(ferry__node_socket(a), &o[i], 16, (uint64_t)i);
		tt_wait_location(c, &o[i], 1);
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &o[i], NULL));
		tt_wait_location(c, &o[i], 2); /* B's copy is listed */
	}
	ftest_assert_uint_eq(tt_stats(b).locations_followed, 2);
	tt_wait_cached(ferry__node_objmgr(b), &o[2], 2, locs); /* B's copy event of o2 is in */
	before = tt_stats(b).location_events;
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(a), NULL, &pc));
	ftest_assert_ok(ferry_plasma_client_delete(pc, &o[0], 1, &status));
	ferry_plasma_client_disconnect(pc);
	wait_listed_exactly(c, &o[0], 1);
	/* After o0's change, one of o1: once B has it, B would have had o0's too. */
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(t.node[2]), &o[1], NULL));
	tt_wait_cached(ferry__node_objmgr(b), &o[1], 3, locs);
	taken = tt_stats(b).location_events - before;
	ftest_log("location events B took meanwhile: %llu", (unsigned long long)taken);
	ftest_assert_uint_eq(taken, 1);
	ftest_assert_uint_eq(tt_stats(b).locations_followed, 2);
	tt_cluster_stop(&t);
}
