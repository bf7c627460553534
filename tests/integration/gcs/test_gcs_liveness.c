/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Liveness and load at the real ferry-gcs: heartbeats write nothing to the WAL and publish
 * nothing on the nodes channel; a node's registration survives a GCS restart on its WAL and the
 * restarted GCS gives it a full deadline (it is not declared dead while it keeps beating); load
 * reports reach load subscribers only (snapshot, deltas, stale versions dropped, removal at
 * death) and the load list.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "common/util.h"
#include "gcs/liveness.h"
#include "tests/integration/gcs/gcs_procs.h"

struct events {
	pthread_mutex_t lock;	     /* guards the rest */
	pthread_cond_t cond;	     /* signalled on each event */
	unsigned deltas;	     /* DELTA events */
	unsigned resyncs;	     /* RESYNC markers */
	unsigned snapshots;	     /* SNAPSHOT items */
	unsigned ends;		     /* SNAPSHOT_END markers */
	unsigned removals;	     /* deltas without data */
	uint64_t last_version;	     /* of the last load decoded */
	int64_t last_tpu_avail;	     /* its "tpu" availability */
	enum ferry_gcs_channel chan; /* channel of the last event */
};

static void events_init(struct events *e)
{
	memset(e, 0, sizeof(*e));
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
}

static void on_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct events *e = arg;
	struct ferry_gcs_node_load l;

	pthread_mutex_lock(&e->lock);
	e->chan = ev->channel;
	if (ev->kind == FERRY_GCS_EVENT_RESYNC)
		e->resyncs++;
	else if (ev->kind == FERRY_GCS_EVENT_SNAPSHOT)
		e->snapshots++;
	else if (ev->kind == FERRY_GCS_EVENT_SNAPSHOT_END)
		e->ends++;
	else if (!ev->size)
		e->removals++;
	else
		e->deltas++;
	if (ev->channel == FERRY_GCS_CH_NODE_LOAD && ev->size &&
	    ferry_gcs_event_node_load(ev, &l) == 0) {
		e->last_version = l.version;
		for (uint32_t i = 0; i < l.nresources; i++)
			if (!strcmp(l.resources[i].name, "tpu"))
				e->last_tpu_avail = l.resources[i].available;
		ferry_gcs_free((void *)(uintptr_t)l.resources);
	}
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Wait for *@counter >= @want (procs.h); its value. */
static unsigned events_wait(struct events *e, const unsigned *counter, unsigned want)
{
	return itest_counter_wait(&e->lock, &e->cond, counter, want);
}

static unsigned events_get(struct events *e, const unsigned *counter)
{
	unsigned v;

	pthread_mutex_lock(&e->lock);
	v = *counter;
	pthread_mutex_unlock(&e->lock);
	return v;
}

static void node_register(struct ferry_gcs_client *c, struct ferry_node_id *id)
{
	struct ferry_gcs_node_info n = {0};

	ferry_node_id_random(id);
	n.id = *id;
	n.address = "10.0.0.9:1";
	n.cpu = 2;
	ftest_assert_int_ge(ferry_gcs_node_register(c, &n), 0);
}

/* A hash (FNV-1a) of the contents of every file in @dir: the log's files are allocated in
 * whole blocks, so their sizes do not show a record being added; their bytes do. Each file's
 * trailing zeros are left out: the log zero-fills ahead of its end whenever it likes (after
 * an acknowledgement too), and replay reads them as the end. */
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
				h *= 1099511628211ull; /* (h ^ 0) * prime */
			h = (h ^ (uint64_t)ch) * 1099511628211ull;
		}
		fclose(f);
	}
	closedir(dh);
	return h;
}

/* ferry_gcs_task_event_add_async(), waited for: its result. */
struct tev_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned done;
	int status;
};

static void tev_done(void *arg, int status, void *result)
{
	struct tev_wait *w = arg;

	ferry_gcs_free(result);
	pthread_mutex_lock(&w->lock);
	w->status = status;
	w->done = 1;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static int sync_task_event(struct ferry_gcs_client *c, const struct ferry_gcs_task_event *e)
{
	struct tev_wait w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	int ret = ferry_gcs_task_event_add_async(c, e, tev_done, &w);

	if (ret < 0)
		return ret;
	itest_counter_wait(&w.lock, &w.cond, &w.done, 1);
	return w.status;
}

/* A load report of @id: CPU 2, tpu @tpu_avail of 4 (fixed point). */
static int report(struct ferry_gcs_client *c, const struct ferry_node_id *id, uint64_t version,
		  int64_t tpu_avail)
{
	const struct ferry_gcs_resource_load res[] = {
		{"CPU", 2 * FERRY_GCS_RESOURCE_UNIT, 2 * FERRY_GCS_RESOURCE_UNIT},
		{"tpu", 4 * FERRY_GCS_RESOURCE_UNIT, tpu_avail},
	};
	struct ferry_gcs_node_load l = {0};

	l.id = *id;
	l.version = version;
	l.queue_length = 3;
	l.nresources = 2;
	l.resources = res;
	return ferry_gcs_node_report_load(c, &l);
}

FTEST(heartbeats_touch_neither_the_wal_nor_the_nodes_channel)
{
	char wal[512];
	const char *args[] = {"--wal", wal, NULL};
	struct gcs_proc p;
	struct ferry_gcs_client *c, *sub;
	struct ferry_node_id id;
	struct events e;
	uint64_t before;

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	sub = client_for(&p, 1, TOKEN);
	node_register(c, &id);
	events_init(&e);
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODES, NULL, 0, on_event, &e));
	ftest_assert_uint_ge(events_wait(&e, &e.snapshots, 1), 1);
	before = dir_hash(wal);
	for (int i = 0; i < 200; i++)
		ftest_assert_int_ge(ferry_gcs_node_heartbeat(c, &id, 1, 0, 0), 0);
	ftest_assert_uint_eq(dir_hash(wal), before);
	/* A second node's registration is the fence: its delta comes after anything the
	 * heartbeats could have published. */
	node_register(c, &(struct ferry_node_id){0});
	ftest_assert_uint_ge(events_wait(&e, &e.deltas, 1), 1);
	usleep(100 * 1000);
	ftest_assert_uint_eq(events_get(&e, &e.deltas), 1); /* the fence alone */
	ftest_assert_uint_ne(dir_hash(wal), before);	    /* a registration is logged */
	ferry_gcs_client_destroy(sub);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* Task events (ferry list tasks) are kept in memory like load reports: listed oldest first
 * with every field, never written to the WAL, gone after a restart; a bad one is refused. */
FTEST(task_events_are_listed_and_never_logged)
{
	char wal[512];
	const char *args[] = {"--wal", wal, NULL};
	struct ferry_gcs_task_event e = {0}, *got = NULL;
	struct gcs_proc p;
	struct ferry_gcs_client *c;
	uint64_t before;
	int n;

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	before = dir_hash(wal);
	for (uint32_t i = 0; i < 300; i++) {
		memset(&e, 0, sizeof(e));
		e.task.bytes[0] = (uint8_t)(1 + i % 100);
		e.task.bytes[1] = 7;
		e.job.bytes[0] = 9;
		e.state = i < 100   ? FERRY_GCS_TASK_SUBMITTED
			  : i < 200 ? FERRY_GCS_TASK_SCHEDULED
				    : FERRY_GCS_TASK_FINISHED;
		e.worker.bytes[3] = i >= 100 ? 5 : 0;
		e.time_ms = 1000 + i;
		snprintf(e.name, sizeof(e.name), "fn_%u", i % 100);
		ftest_assert_int_eq(sync_task_event(c, &e), 1);
	}
	n = ferry_gcs_task_event_list(c, &got);
	ftest_assert_int_eq(n, 300);
	ftest_assert_uint_eq(got[0].time_ms, 1000);
	ftest_assert_uint_eq(got[299].time_ms, 1299);
	ftest_assert_int_eq(got[299].state, FERRY_GCS_TASK_FINISHED);
	ftest_assert_str_eq(got[299].name, "fn_99");
	ftest_assert_uint_eq(got[299].task.bytes[0], 100);
	ftest_assert_uint_eq(got[299].worker.bytes[3], 5);
	ftest_assert_uint_eq(got[299].job.bytes[0], 9);
	ferry_gcs_free(got);
	ftest_assert_uint_eq(dir_hash(wal), before);
	/* An unknown state: refused by the client before it is sent. */
	e.state = 9;
	ftest_assert_errno(ferry_gcs_task_event_add_async(c, &e, NULL, NULL), -EINVAL);
	gcs_stop(&p, SIGKILL);
	p = gcs_start(p.port, args);
	n = ferry_gcs_task_event_list(c, &got);
	ftest_assert_int_eq(n, 0);
	ferry_gcs_free(got);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(registration_survives_a_restart_and_gets_a_full_deadline)
{
	char wal[512];
	/* A deadline long enough that a sanitizer build's stall (a blocking beat under load) is
	 * not a death: what is checked is which deadline counts, not how short it can be. */
	const char *args[] = {"--wal", wal, "--node-deadline-ms", "1000", NULL};
	struct ferry_gcs_node_info *nodes;
	struct gcs_proc p;
	struct ferry_gcs_client *c;
	struct ferry_node_id id;
	int n;

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	node_register(c, &id);
	ftest_assert_int_eq(report(c, &id, 1, FERRY_GCS_RESOURCE_UNIT), 1);
	ftest_assert_int_eq(ferry_gcs_node_heartbeat(c, &id, 0, 0, 0), 1); /* load held */
	gcs_stop(&p, SIGKILL);
	/* Down for longer than the deadline: the restarted GCS must not count that against it. */
	usleep(1500 * 1000);
	p = gcs_start(p.port, args);
	/* The node keeps beating (every 50 ms) for five deadlines. The first beat learns the
	 * restarted GCS holds no load of it (0); it reports again (1) and beats go back to 1. */
	ftest_assert_int_eq(ferry_gcs_node_heartbeat(c, &id, 0, 0, 0), 0);
	ftest_assert_int_eq(report(c, &id, 2, FERRY_GCS_RESOURCE_UNIT), 1);
	for (int i = 0; i < 100; i++) {
		ftest_assert_int_eq(ferry_gcs_node_heartbeat(c, &id, 0, 0, 0), 1);
		usleep(50 * 1000);
	}
	n = ferry_gcs_node_list(c, &nodes);
	ftest_assert_int_eq(n, 1);
	ftest_assert_mem_eq(&nodes[0].id, &id, sizeof(id));
	ftest_assert_int_eq(nodes[0].state, FERRY_GCS_NODE_ALIVE);
	ftest_assert_true(nodes[0].cpu == 2.0);
	ferry_gcs_free(nodes);
	/* And one that stops beating after a restart is still declared dead. */
	usleep(2500 * 1000);
	ftest_assert_errno(ferry_gcs_node_heartbeat(c, &id, 0, 0, 0), -ENOENT);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(load_reports_reach_load_subscribers_only)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN), *sched, *member, *late;
	struct ferry_gcs_node_load *loads;
	struct ferry_node_id id, other;
	struct events ev_sched, ev_member, ev_late;

	sched = client_for(&p, 1, TOKEN);
	member = client_for(&p, 1, TOKEN);
	events_init(&ev_sched);
	events_init(&ev_member);
	node_register(c, &id);
	ferry_node_id_random(&other);
	ftest_assert_errno(report(c, &other, 1, 0), -ENOENT); /* unregistered: refused */
	ftest_assert_ok(
		ferry_gcs_subscribe(sched, FERRY_GCS_CH_NODE_LOAD, NULL, 0, on_event, &ev_sched));
	ftest_assert_ok(
		ferry_gcs_subscribe(member, FERRY_GCS_CH_NODES, NULL, 0, on_event, &ev_member));
	ftest_assert_uint_ge(events_wait(&ev_member, &ev_member.snapshots, 1), 1);
	ftest_assert_uint_ge(events_wait(&ev_sched, &ev_sched.resyncs, 1), 1);

	ftest_assert_int_eq(report(c, &id, 10, 3 * FERRY_GCS_RESOURCE_UNIT), 1);
	ftest_assert_uint_eq(events_wait(&ev_sched, &ev_sched.deltas, 1), 1);
	ftest_assert_uint_eq(ev_sched.last_version, 10);
	ftest_assert_int_eq(ev_sched.last_tpu_avail, 3 * FERRY_GCS_RESOURCE_UNIT);
	/* A stale version (a resend) is dropped; a newer one goes out. */
	ftest_assert_int_eq(report(c, &id, 9, 0), 0);
	ftest_assert_int_eq(report(c, &id, 11, FERRY_GCS_RESOURCE_UNIT / 2), 1);
	ftest_assert_uint_eq(events_wait(&ev_sched, &ev_sched.deltas, 2), 2);
	ftest_assert_uint_eq(ev_sched.last_version, 11);
	ftest_assert_int_eq(ev_sched.last_tpu_avail, FERRY_GCS_RESOURCE_UNIT / 2);

	ftest_assert_int_eq(ferry_gcs_node_load_list(c, &loads), 1);
	ftest_assert_uint_eq(loads[0].version, 11);
	ftest_assert_uint_eq(loads[0].queue_length, 3);
	ftest_assert_uint_eq(loads[0].nresources, 2);
	ftest_assert_str_eq(loads[0].resources[1].name, "tpu");
	ftest_assert_int_eq(loads[0].resources[1].total, 4 * FERRY_GCS_RESOURCE_UNIT);
	ferry_gcs_free(loads);

	/* A scheduler that subscribes later gets the latest report as a snapshot. */
	late = client_for(&p, 1, TOKEN);
	events_init(&ev_late);
	ftest_assert_ok(
		ferry_gcs_subscribe(late, FERRY_GCS_CH_NODE_LOAD, NULL, 0, on_event, &ev_late));
	ftest_assert_uint_eq(events_wait(&ev_late, &ev_late.snapshots, 1), 1);
	ftest_assert_uint_eq(ev_late.last_version, 11);

	/* Death: a removal for load subscribers, the dead record for members; the list empties. */
	ftest_assert_int_eq(ferry_gcs_node_unregister(c, &id), 1);
	ftest_assert_uint_eq(events_wait(&ev_sched, &ev_sched.removals, 1), 1);
	ftest_assert_uint_eq(events_wait(&ev_member, &ev_member.deltas, 1), 1);
	ftest_assert_int_eq(ferry_gcs_node_load_list(c, &loads), 0);
	ferry_gcs_free(loads);
	/* Members saw the death alone: no load report reached the nodes channel. */
	usleep(100 * 1000);
	ftest_assert_uint_eq(events_get(&ev_member, &ev_member.deltas), 1);
	ftest_assert_int_eq(ev_member.chan, FERRY_GCS_CH_NODES);
	ferry_gcs_client_destroy(late);
	ferry_gcs_client_destroy(member);
	ferry_gcs_client_destroy(sched);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/*
 * A node whose connection is closed by its side (its process was killed: the kernel closes the
 * socket) is declared dead a fifth of its deadline later, not a whole deadline after its last
 * beat; one that only stops beating still gets the whole deadline. The 20 s deadline makes the
 * difference plain without timing anything closely: the old GCS needed 20 s, events_wait gives
 * up after 10.
 */
FTEST(a_node_whose_connection_closes_is_dead_before_its_deadline)
{
	const char *args[] = {"--node-deadline-ms", "20000", NULL};
	struct ferry_gcs_node_info *nodes;
	struct ferry_gcs_client *c, *quiet, *sub;
	struct ferry_node_id id, still;
	struct gcs_proc p;
	struct events e;
	int n;

	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	quiet = client_for(&p, 1, TOKEN);
	sub = client_for(&p, 1, TOKEN);
	node_register(c, &id);
	ftest_assert_int_ge(ferry_gcs_node_heartbeat(c, &id, 0, 0, 0), 0);
	node_register(quiet, &still); /* registers, then never beats and keeps its connection */
	events_init(&e);
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODES, NULL, 0, on_event, &e));
	ftest_assert_uint_ge(events_wait(&e, &e.snapshots, 2), 2);
	ferry_gcs_client_destroy(c); /* closes its connection, as a killed node's kernel does */
	ftest_assert_uint_eq(events_wait(&e, &e.deltas, 1), 1);
	n = ferry_gcs_node_list(sub, &nodes);
	ftest_assert_int_eq(n, 2);
	for (int i = 0; i < n; i++)
		ftest_assert_int_eq(nodes[i].state, memcmp(&nodes[i].id, &id, sizeof(id))
							    ? FERRY_GCS_NODE_ALIVE
							    : FERRY_GCS_NODE_DEAD);
	ferry_gcs_free(nodes);
	ferry_gcs_client_destroy(quiet);
	ferry_gcs_client_destroy(sub);
	gcs_stop(&p, SIGTERM);
}

struct pending {
	pthread_mutex_t lock; /* guards the rest */
	pthread_cond_t cond;  /* signalled on each answer */
	unsigned answered;    /* answers so far */
	unsigned failed;      /* of them, errors */
};

static void on_answer(void *arg, int status, void *result)
{
	struct pending *p = arg;

	(void)result;
	pthread_mutex_lock(&p->lock);
	p->answered++;
	p->failed += status < 0;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* Wait until @want answers in all have come; the errors among them. */
static unsigned pending_wait(struct pending *p, unsigned want)
{
	unsigned failed;

	pthread_mutex_lock(&p->lock);
	while (p->answered < want)
		pthread_cond_wait(&p->cond, &p->lock);
	failed = p->failed;
	pthread_mutex_unlock(&p->lock);
	return failed;
}

/*
 * 1,000 nodes beating at the interval a node of a 1,000-node cluster uses (gcs/liveness.h:
 * 250 ms, longer than the configured 100 ms deadline) stay alive: the GCS sized its deadline to
 * the cluster as the nodes sized their interval. With a deadline fixed at 100 ms every one of
 * them died between two beats. Calls are pipelined, as 1,000 nodes send them at once.
 */
FTEST(the_deadline_grows_with_the_cluster_as_the_interval_does)
{
	enum { NODES = 1000, ROUNDS = 8 };
	const char *args[] = {"--node-deadline-ms", "100", NULL};
	uint32_t interval = ferry__gcs_beat_interval_ms(100, NODES);
	static struct ferry_node_id ids[NODES];
	struct pending pend = {.answered = 0};
	struct ferry_gcs_node_info *list;
	struct ferry_gcs_client *c;
	struct gcs_proc p;
	int n;

	ftest_assert_uint_gt(interval, 100); /* else this test shows nothing */
	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	pthread_mutex_init(&pend.lock, NULL);
	pthread_cond_init(&pend.cond, NULL);
	for (unsigned i = 0; i < NODES; i++) {
		struct ferry_gcs_node_info info = {.address = "10.0.0.9:1", .cpu = 1};

		ferry_node_id_random(&ids[i]);
		info.id = ids[i];
		ftest_assert_ok(ferry_gcs_node_register_async(c, &info, on_answer, &pend));
	}
	ftest_assert_uint_eq(pending_wait(&pend, NODES), 0);
	for (unsigned r = 1; r <= ROUNDS; r++) {
		uint64_t start = ferry__now_ms(), spent;

		for (unsigned i = 0; i < NODES; i++)
			ftest_assert_ok(ferry_gcs_node_heartbeat_async(c, &ids[i], 0, 0, 0,
								       on_answer, &pend));
		ftest_assert_uint_eq(pending_wait(&pend, NODES * (r + 1)), 0);
		spent = ferry__now_ms() - start;
		if (spent < interval)
			usleep((useconds_t)(interval - spent) * 1000);
	}
	n = ferry_gcs_node_list(c, &list);
	ftest_assert_int_eq(n, NODES);
	for (int i = 0; i < n; i++)
		ftest_assert_int_eq(list[i].state, FERRY_GCS_NODE_ALIVE);
	ferry_gcs_free(list);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}
