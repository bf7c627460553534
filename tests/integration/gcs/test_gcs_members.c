/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Membership at the real ferry-gcs (issue 22): a heartbeat's reply carries the cluster's size,
 * the node-deaths channel carries drains and deaths only, and a real ferry-node keeps its
 * registration across GCS restarts: on a WAL it is replayed (the node is not declared dead
 * while it keeps beating, and its beats write nothing to the WAL); in memory the node
 * registers again under the same ID and address; a node the GCS declared dead exits (3).
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "common/util.h"
#include "tests/integration/gcs/gcs_procs.h"

/* ---- beat replies ---- */

struct beat {
	pthread_mutex_t lock;		 /* guards the rest */
	pthread_cond_t cond;		 /* done */
	bool done;			 /* the callback ran */
	int status;			 /* its status */
	bool has_info;			 /* a result came */
	struct ferry_gcs_beat_info info; /* the result */
};

static void on_beat(void *arg, int status, void *result)
{
	struct beat *b = arg;

	pthread_mutex_lock(&b->lock);
	b->status = status;
	b->has_info = result != NULL;
	if (result)
		b->info = *(struct ferry_gcs_beat_info *)result;
	ferry_gcs_free(result);
	b->done = true;
	pthread_cond_signal(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

/* One beat of @id; its status, *@info filled (asserted present when the status is >= 0). */
static int beat(struct ferry_gcs_client *c, const struct ferry_node_id *id,
		struct ferry_gcs_beat_info *info)
{
	struct beat b = {.done = false};

	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cond, NULL);
	ftest_assert_ok(ferry_gcs_node_beat_async(c, id, on_beat, &b));
	pthread_mutex_lock(&b.lock);
	while (!b.done)
		pthread_cond_wait(&b.cond, &b.lock); /* the client's timeout bounds it */
	pthread_mutex_unlock(&b.lock);
	if (b.status >= 0)
		ftest_assert_true(b.has_info);
	*info = b.info;
	pthread_cond_destroy(&b.cond);
	pthread_mutex_destroy(&b.lock);
	return b.status;
}

static void node_register(struct ferry_gcs_client *c, struct ferry_node_id *id)
{
	struct ferry_gcs_node_info n = {0};

	ferry_node_id_random(id);
	n.id = *id;
	n.address = "10.0.0.9:1";
	n.cpu = 1;
	ftest_assert_int_ge(ferry_gcs_node_register(c, &n), 0);
}

FTEST(a_beat_reply_carries_the_alive_count_and_a_membership_version)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_node_id ids[3], unknown;
	struct ferry_gcs_beat_info a, b;

	for (int i = 0; i < 3; i++)
		node_register(c, &ids[i]);
	ftest_assert_int_ge(beat(c, &ids[0], &a), 0);
	ftest_assert_uint_eq(a.alive_nodes, 3);
	/* A beat changes nothing; a join moves both. */
	ftest_assert_int_ge(beat(c, &ids[1], &b), 0);
	ftest_assert_uint_eq(b.membership_version, a.membership_version);
	node_register(c, &unknown);
	ftest_assert_int_ge(beat(c, &ids[1], &b), 0);
	ftest_assert_uint_eq(b.alive_nodes, 4);
	ftest_assert_uint_gt(b.membership_version, a.membership_version);
	/* A drained node is still alive; a dead one is not counted. */
	ftest_assert_int_eq(ferry_gcs_node_drain(c, &ids[2]), 1);
	ftest_assert_int_eq(ferry_gcs_node_unregister(c, &unknown), 1);
	ftest_assert_int_ge(beat(c, &ids[0], &a), 0);
	ftest_assert_uint_eq(a.alive_nodes, 3);
	ftest_assert_uint_gt(a.membership_version, b.membership_version);
	ftest_assert_errno(beat(c, &unknown, &a), -ENOENT);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* ---- the deaths channel ---- */

struct seen {
	pthread_mutex_t lock;	 /* guards the rest */
	pthread_cond_t cond;	 /* each event */
	unsigned deaths_deltas;	 /* deltas on NODE_DEATHS */
	unsigned deaths_snaps;	 /* snapshot items on NODE_DEATHS */
	unsigned nodes_deltas;	 /* deltas on NODES */
	int last_state;		 /* of the last NODE_DEATHS delta */
	struct ferry_node_id id; /* its node */
};

static void on_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct seen *s = arg;
	struct ferry_gcs_node_info info;

	pthread_mutex_lock(&s->lock);
	if (ev->channel == FERRY_GCS_CH_NODE_DEATHS && ev->kind == FERRY_GCS_EVENT_SNAPSHOT)
		s->deaths_snaps++;
	if (ev->kind == FERRY_GCS_EVENT_DELTA && ev->channel == FERRY_GCS_CH_NODES)
		s->nodes_deltas++;
	if (ev->kind == FERRY_GCS_EVENT_DELTA && ev->channel == FERRY_GCS_CH_NODE_DEATHS) {
		s->deaths_deltas++;
		ftest_assert_ok(ferry_gcs_event_node(ev, &info));
		s->last_state = info.state;
		s->id = info.id;
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* Wait for *@counter >= @want (procs.h); its value. */
static unsigned seen_wait(struct seen *s, const unsigned *counter, unsigned want)
{
	return itest_counter_wait(&s->lock, &s->cond, counter, want);
}

/* The last NODE_DEATHS delta's state and node, read under the lock. */
static int seen_last(struct seen *s, struct ferry_node_id *id)
{
	int state;

	pthread_mutex_lock(&s->lock);
	state = s->last_state;
	*id = s->id;
	pthread_mutex_unlock(&s->lock);
	return state;
}

FTEST(the_deaths_channel_carries_drains_and_deaths_not_joins)
{
	/* The nodes never beat: a long deadline keeps the liveness sweep from adding deaths of
	 * its own while the test runs (slowly, under TSan). */
	const char *args[] = {"--node-deadline-ms", "60000", NULL};
	struct gcs_proc p = gcs_start(0, args);
	struct ferry_node_id last;
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_gcs_client *sub = client_for(&p, 1, TOKEN);
	struct ferry_node_id a, b;
	struct seen s = {.deaths_deltas = 0};

	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.cond, NULL);
	node_register(c, &a);
	/* One subscriber connection for both: its deliveries keep the server's order, so the
	 * nodes channel's delta of a later change fences the deaths channel's. */
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODE_DEATHS, NULL, 0, on_event, &s));
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODES, NULL, 0, on_event, &s));
	node_register(c, &b); /* a join: nodes only */
	ftest_assert_uint_ge(seen_wait(&s, &s.nodes_deltas, 1), 1);
	ftest_assert_int_eq(ferry_gcs_node_drain(c, &a), 1);
	ftest_assert_uint_ge(seen_wait(&s, &s.nodes_deltas, 2), 2);
	ftest_assert_uint_eq(seen_wait(&s, &s.deaths_deltas, 1), 1);
	ftest_assert_int_eq(seen_last(&s, &last), FERRY_GCS_NODE_DRAINING);
	ftest_assert_mem_eq(&last, &a, sizeof(a));
	ftest_assert_int_eq(ferry_gcs_node_unregister(c, &b), 1);
	ftest_assert_uint_eq(seen_wait(&s, &s.deaths_deltas, 2), 2);
	ftest_assert_int_eq(seen_last(&s, &last), FERRY_GCS_NODE_DEAD);
	ftest_assert_mem_eq(&last, &b, sizeof(b));
	ftest_assert_uint_ge(seen_wait(&s, &s.nodes_deltas, 3), 3);
	ftest_assert_uint_eq(seen_wait(&s, &s.deaths_snaps, 0), 0); /* none: O(1) a subscriber */
	ferry_gcs_client_destroy(sub);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* ---- a real ferry-node across GCS restarts ---- */

struct node_proc {
	pid_t pid;		 /* ferry-node */
	struct ferry_node_id id; /* from its ready line */
	char address[256];	 /* same */
	char log[512];		 /* its stderr */
};

static struct node_proc node_start(uint16_t gcs_port)
{
	const char *bin = getenv("FERRY_NODE_BIN");
	struct node_proc n = {0};
	char cmd[2048], line[1024], hex[64];
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};

	if (!bin)
		ftest_skip("FERRY_NODE_BIN not set (run through meson test)");
	snprintf(n.log, sizeof(n.log), "%s/node.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "exec %s --gcs 127.0.0.1:%u --token-file %s --ip 127.0.0.1 --memory 32M "
		 "--transport tcp --socket %s/store.sock 2>%s",
		 bin, gcs_port, token_file(), ftest_tmpdir(), n.log);
	n.pid = itest_spawn(argv, line, sizeof(line));
	ftest_assert_int_eq(sscanf(line, "ferry-node ready id=%32s address=%255s", hex, n.address),
			    2);
	ftest_assert_ok(ferry_node_id_from_hex(hex, &n.id));
	return n;
}

/* The node's state in the GCS's list (its address checked against @address), 0: absent. */
static int node_state(struct ferry_gcs_client *c, const struct ferry_node_id *id,
		      const char *address)
{
	struct ferry_gcs_node_info *list;
	int n = ferry_gcs_node_list(c, &list), state = 0;

	ftest_assert_int_ge(n, 0);
	for (int i = 0; i < n; i++) {
		if (!ferry_node_id_eq(&list[i].id, id))
			continue;
		ftest_assert_str_eq(list[i].address, address);
		state = list[i].state;
	}
	ferry_gcs_free(list);
	return state;
}

/* Poll (every 50 ms, 15 s at most: a hang, not a speed check) until the node is in @state. */
static int wait_state(struct ferry_gcs_client *c, const struct node_proc *n, int state)
{
	int got = 0;

	for (int i = 0; i < 300 && (got = node_state(c, &n->id, n->address)) != state; i++)
		usleep(50 * 1000);
	return got;
}

/* The node's exit status once it exited (15 s at most), -1 if it did not. */
static int wait_exit(pid_t pid)
{
	int status;

	for (int i = 0; i < 300; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		usleep(50 * 1000);
	}
	return -1;
}

static void node_stop(struct node_proc *n)
{
	int status;

	kill(n->pid, SIGTERM);
	ftest_assert_int_eq(waitpid(n->pid, &status, 0), n->pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A hash (FNV-1a) of every file in @dir without each file's trailing zeros (the log
 * preallocates and zero-fills ahead of its end): a record written changes it. */
static uint64_t dir_hash(const char *dir)
{
	uint64_t h = 1469598103934665603ull, zeros;
	char path[1024];
	struct dirent *d;
	DIR *dh = opendir(dir);
	FILE *f;
	int ch;

	ftest_assert_ptr_notnull(dh);
	while ((d = readdir(dh))) {
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		if (d->d_name[0] == '.' || !(f = fopen(path, "rb")))
			continue;
		zeros = 0;
		while ((ch = getc(f)) != EOF) {
			if (!ch) {
				zeros++;
				continue;
			}
			for (; zeros; zeros--)
				h *= 1099511628211ull;
			h = (h ^ (uint64_t)ch) * 1099511628211ull;
		}
		fclose(f);
	}
	closedir(dh);
	return h;
}

FTEST(a_node_keeps_its_registration_across_a_restart_on_the_wal_and_beats_write_nothing)
{
	char wal[512];
	/* Long enough that a node reconnecting under a sanitizer build's load is not dead first. */
	const char *args[] = {"--wal", wal, "--node-deadline-ms", "1000", NULL};
	struct ferry_gcs_client *c;
	struct node_proc n;
	struct gcs_proc p;
	uint64_t before;

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	n = node_start(p.port);
	gcs_stop(&p, SIGKILL);
	usleep(1500 * 1000); /* down for longer than the deadline */
	p = gcs_start(p.port, args);
	c = client_for(&p, 1, TOKEN);
	ftest_assert_int_eq(node_state(c, &n.id, n.address), FERRY_GCS_NODE_ALIVE); /* replayed */
	usleep(1000 * 1000); /* the node reconnects, resubscribes and reports its load again */
	before = dir_hash(wal);
	usleep(5000 * 1000); /* five deadlines of beats */
	ftest_assert_uint_eq(dir_hash(wal), before);
	ftest_assert_int_eq(node_state(c, &n.id, n.address), FERRY_GCS_NODE_ALIVE);
	ftest_assert_false(itest_log_has(n.log, "registered again"));
	node_stop(&n);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(a_node_registers_again_after_an_in_memory_gcs_restart_and_exits_once_declared_dead)
{
	struct ferry_gcs_client *c;
	char gcs[64];
	struct node_proc n;
	struct gcs_proc p = gcs_start(0, NULL);

	n = node_start(p.port);
	gcs_stop(&p, SIGKILL);
	p = gcs_start(p.port, NULL); /* knows nothing */
	c = client_for(&p, 1, TOKEN);
	/* Same ID, same address (node_state checks it). */
	ftest_assert_int_eq(wait_state(c, &n, FERRY_GCS_NODE_ALIVE), FERRY_GCS_NODE_ALIVE);
	ftest_assert_true(itest_log_has(n.log, "registered again with the same ID and address"));
	/* The loss and the return are said at the default level, naming the GCS. */
	snprintf(gcs, sizeof(gcs), "lost the GCS at 127.0.0.1:%u", p.port);
	ftest_assert_true(itest_log_has(n.log, gcs));
	ftest_assert_true(itest_log_has(n.log, "reconnected to the GCS at 127.0.0.1"));
	/* Declared dead: its next beat learns it, and it exits, saying why. */
	ftest_assert_int_eq(ferry_gcs_node_unregister(c, &n.id), 1);
	ftest_assert_int_eq(wait_exit(n.pid), 3);
	ftest_assert_true(itest_log_has(n.log, "the GCS declared this node dead"));
	ftest_assert_int_eq(node_state(c, &n.id, n.address), FERRY_GCS_NODE_DEAD);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* A node started against a port nothing listens on fails (within the GCS client's 10 s) saying
 * the connection was refused and what that means: it said "Timed out". */
FTEST(a_node_without_a_gcs_says_the_connection_was_refused)
{
	const char *bin = getenv("FERRY_NODE_BIN");
	struct gcs_proc p = gcs_start(0, NULL);
	char cmd[2048], log[512], line[256], first[256];
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	uint16_t port = p.port;
	pid_t pid;

	if (!bin)
		ftest_skip("FERRY_NODE_BIN not set (run through meson test)");
	gcs_stop(&p, SIGTERM); /* its port is free now: nothing listens there */
	snprintf(log, sizeof(log), "%s/node.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "exec %s --gcs 127.0.0.1:%u --token-file %s --ip 127.0.0.1 --memory 32M "
		 "--transport tcp --socket %s/store.sock 2>%s",
		 bin, port, token_file(), ftest_tmpdir(), log);
	pid = itest_spawn(argv, first, sizeof(first)); /* no ready line: "" */
	ftest_assert_int_eq(wait_exit(pid), 1);
	snprintf(line, sizeof(line), "GCS 127.0.0.1:%u not reached: Connection refused", port);
	ftest_assert_true(itest_log_has(log, line));
	ftest_assert_true(itest_log_has(log, "nothing listens there"));
	ftest_assert_false(itest_log_has(log, "Timed out"));
}
