/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The global scheduler's client (sched/client.h): finds ferry-sched instances in the GCS KV,
 * sends the requests of one loop turn as one SchedPlace, keeps each request until its reply and
 * moves the outstanding ones to another instance when a connection closes or stays silent.
 *
 * DESIGN: a request (struct pend) is in exactly one of two lists: unsent (waiting for a
 * connection or the next flush) or sent (on the current connection, oldest first). A request
 * carries a wire ID of the client's own (a counter), so that a late reply from an instance the
 * client has left, or a duplicate after a resend, finds nothing and is dropped, even when the
 * caller reuses its own ID. Failing over walks the instances from hash(self) onwards; a round is
 * one attempt at each; after a round without a reply, the client pauses, reads the KV again and
 * starts another; after `rounds` of them every waiting request gets -EHOSTUNREACH.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/hash.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/wire.h"
#include "sched/client.h"
#include "sched/proto.h"

#define COMP "sched-client"
#define DEFAULT_REPLY_TIMEOUT_MS 2000u
#define DEFAULT_RETRY_PAUSE_MS 200u
#define DEFAULT_ROUNDS 3u
#define INSTANCES_MAX 64
#define HOST_MAX 256
/* Bytes of frame a batch may fill before the next item starts a new one (under the 4 MiB cap). */
#define BATCH_BYTES_MAX (3u << 20)

struct pend {
	uint64_t id;					  /* the caller's */
	uint64_t wire_id;				  /* ours, sent as request_id */
	ferry__sched_place_fn cb;			  /* the answer */
	void *arg;					  /* its argument */
	struct ferry__sched_place_req req;		  /* pointers into res and inputs below */
	struct ferry__res res[FERRY__SCHED_ITEM_RES_MAX]; /* copied */
	struct ferry__sched_place_input *inputs;	  /* copied, ferry__malloc'd */
	char from_group[FERRY__SCHED_GROUP_NAME_MAX + 1]; /* copied */
	uint64_t sent_ms;	  /* when it went out on the current connection */
	bool sent;		  /* in the sent list (else unsent) */
	struct pend *prev, *next; /* its list */
};

struct plist {
	struct pend *head, *tail; /* oldest first */
};

struct instance {
	char host[HOST_MAX]; /* from the KV value "host:port" */
	uint16_t port;	     /* its port */
};

struct lookup {
	struct ferry__sched_client *c; /* NULL: the client was freed meanwhile */
};

struct ferry__sched_client {
	struct ferry__loop *loop;	     /* the caller's */
	struct ferry_gcs_client *gcs;	     /* borrowed */
	uint8_t token[256];		     /* the cluster token */
	size_t token_len;		     /* its bytes */
	struct ferry_node_id self;	     /* who we speak for */
	struct ferry__hashmap by_id;	     /* caller's ID -> struct pend * */
	struct ferry__hashmap by_wire;	     /* wire ID -> struct pend * */
	struct plist unsent;		     /* waiting to go out */
	struct plist sent;		     /* on conn, oldest first */
	uint64_t next_wire_id;		     /* counter */
	struct ferry__conn *conn;	     /* current connection, or NULL */
	bool up;			     /* conn's handshake done */
	struct instance inst[INSTANCES_MAX]; /* from the last KV read */
	unsigned ninst;			     /* entries of inst */
	unsigned cursor;		     /* next instance to try */
	unsigned tried;			     /* attempts in this round */
	unsigned round;			     /* rounds without a reply */
	struct lookup *lookup;		     /* KV read in flight, or NULL */
	bool pausing;			     /* the pause between rounds runs (retry timer) */
	struct ferry__loop_timer flush;	     /* end of the loop turn: send the batch */
	struct ferry__loop_timer tick;	     /* reply deadline checks */
	struct ferry__loop_timer retry;	     /* pause between rounds */
	struct ferry__fb_builder fb;	     /* batches */
	unsigned reply_timeout_ms;	     /* see set_timing */
	unsigned retry_pause_ms;	     /* see set_timing */
	unsigned rounds;		     /* see set_timing */
	bool freeing;			     /* in ferry__sched_client_free(): no new requests */
	char ns[128];			     /* the KV namespace of the instances */
	unsigned hops;			     /* of the answer being delivered */
};

static void plist_push(struct plist *l, struct pend *p)
{
	p->next = NULL;
	p->prev = l->tail;
	if (l->tail)
		l->tail->next = p;
	else
		l->head = p;
	l->tail = p;
}

static void plist_del(struct plist *l, struct pend *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		l->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		l->tail = p->prev;
	p->prev = p->next = NULL;
}

/* Take @p out of every list and map; the caller then answers and frees it. */
static void pend_unlink(struct ferry__sched_client *c, struct pend *p)
{
	plist_del(p->sent ? &c->sent : &c->unsent, p);
	ferry__hashmap_remove(&c->by_id, &p->id, NULL);
	ferry__hashmap_remove(&c->by_wire, &p->wire_id, NULL);
}

static void pend_free(struct pend *p)
{
	ferry__free(p->inputs);
	ferry__free(p);
}

static void pend_answer(struct ferry__sched_client *c, struct pend *p, int status,
			const struct ferry_node_id *node, const char *address)
{
	ferry__sched_place_fn cb = p->cb;
	void *arg = p->arg;

	pend_unlink(c, p);
	pend_free(p);
	cb(arg, status, node, address);
}

static void fail_all(struct ferry__sched_client *c, int status)
{
	struct pend *p;

	while ((p = c->sent.head) || (p = c->unsent.head))
		pend_answer(c, p, status, NULL, NULL);
}

/* Every request on the connection goes back to the front of the unsent list, in order. */
static void requeue_sent(struct ferry__sched_client *c)
{
	struct pend *p;

	while ((p = c->sent.tail)) {
		plist_del(&c->sent, p);
		p->sent = false;
		p->next = c->unsent.head;
		p->prev = NULL;
		if (c->unsent.head)
			c->unsent.head->prev = p;
		else
			c->unsent.tail = p;
		c->unsent.head = p;
	}
}

static void connect_next(struct ferry__sched_client *c);
static void on_tick(struct ferry__loop_timer *t, int status);
static void send_unsent(struct ferry__sched_client *c);

/* ---- the connection ---- */

static void on_reply(struct ferry__sched_client *c, const void *payload, size_t len)
{
	int n = ferry__sched_reply_count(payload, len);

	for (int i = 0; i < n; i++) {
		struct ferry__sched_result r;
		struct pend **slot;

		if (ferry__sched_reply_result(payload, (uint32_t)i, &r) < 0) {
			n = -EPROTO;
			break;
		}
		slot = ferry__hashmap_get(&c->by_wire, &r.request_id);
		if (!slot || !(*slot)->sent)
			continue; /* a late or duplicate reply: answered already */
		c->hops = r.hops;
		pend_answer(c, *slot, r.status, r.status == 0 ? &r.node : NULL,
			    r.status == 0 ? r.node_address : NULL);
	}
	if (n < 0) {
		FLOG_WARN(COMP, "%s: malformed SchedPlaceReply, closing",
			  ferry__conn_peer(c->conn));
		ferry__conn_close(c->conn);
		return;
	}
	c->round = 0; /* an instance answers: the rounds start again */
	c->tried = 0;
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct ferry__sched_client *c = ferry__conn_data(conn);

	if (type != FERRY__WIRE_MSG_SCHED_PLACE_REPLY) {
		FLOG_WARN(COMP, "%s: unexpected %s, closing", ferry__conn_peer(conn),
			  ferry__wire_message_name(type));
		ferry__conn_close(conn);
		return;
	}
	on_reply(c, payload, len);
}

static void on_connect(struct ferry__conn *conn)
{
	struct ferry__sched_client *c = ferry__conn_data(conn);

	c->up = true;
	FLOG_DEBUG(COMP, "connected to ferry-sched %s", ferry__conn_peer(conn));
	send_unsent(c);
}

static void on_close(struct ferry__conn *conn, int err)
{
	struct ferry__sched_client *c = ferry__conn_data(conn);
	bool was_up = c->up;

	c->conn = NULL;
	c->up = false;
	if (err == -EACCES)
		FLOG_WARN(COMP, "ferry-sched %s refused this cluster token",
			  ferry__conn_peer(conn));
	else if (err && err != -ECANCELED)
		FLOG_INFO(COMP, "ferry-sched %s %s: %s", ferry__conn_peer(conn),
			  was_up ? "closed" : "not reachable", ferry_strerror(-err));
	requeue_sent(c);
	if (c->unsent.head)
		connect_next(c);
}

static const struct ferry__conn_callbacks conn_cb = {
	.on_message = on_message,
	.on_connect = on_connect,
	.on_close = on_close,
};

/* A connection left behind by ferry__sched_client_free(): only its close remains. */
static void orphan_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	(void)conn, (void)type, (void)payload, (void)len;
}

static void orphan_close(struct ferry__conn *conn, int err)
{
	(void)conn, (void)err;
}

static const struct ferry__conn_callbacks orphan_cb = {
	.on_message = orphan_message,
	.on_close = orphan_close,
};

static int dial(struct ferry__sched_client *c, const struct instance *in)
{
	struct ferry__wire_handshake hs = {0};
	struct ferry__conn_opts co = {0};

	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = c->token;
	hs.token_count = c->token_len;
	hs.peer_kind = FERRY__WIRE_PEER_KIND_NODE;
	memcpy(hs.peer_id.bytes, c->self.bytes, sizeof(hs.peer_id.bytes));
	hs.pid = (int32_t)getpid();
	hs.name = "sched-client";
	co.cb = &conn_cb;
	co.data = c;
	co.handshake = &hs;
	co.max_message_bytes = FERRY__SCHED_FRAME_MAX;
	co.connect_timeout_ms = c->reply_timeout_ms;
	return ferry__conn_connect_tcp(c->loop, in->host, in->port, &co, &c->conn);
}

/* ---- finding instances ---- */

static int parse_instance(const void *value, size_t size, struct instance *out)
{
	return ferry__sched_instance_parse(value, size, out->host, sizeof(out->host), &out->port);
}

int ferry__sched_instance_parse(const void *value, size_t size, char *host, size_t host_size,
				uint16_t *port_out)
{
	char text[HOST_MAX + 8];
	char *colon, *end;
	unsigned long port;

	if (size == 0 || size >= sizeof(text))
		return -EINVAL;
	memcpy(text, value, size);
	text[size] = '\0';
	colon = strrchr(text, ':');
	if (!colon || colon == text || (size_t)(colon - text) >= host_size)
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end || port == 0 || port > 65535)
		return -EINVAL;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	*port_out = (uint16_t)port;
	return 0;
}

bool ferry__sched_group_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > FERRY__SCHED_GROUP_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
			return false;
	return true;
}

static void lookup_done(struct ferry__sched_client *c, int status)
{
	c->tried = 0;
	c->cursor =
		c->ninst ? (unsigned)(ferry__hash_bytes(c->self.bytes, sizeof(c->self.bytes), 0) %
				      c->ninst)
			 : 0;
	if (status < 0 && status != -ENOENT)
		FLOG_WARN(COMP, "reading the ferry-sched instances from the GCS: %s",
			  ferry_strerror(-status));
	if (c->unsent.head)
		connect_next(c);
}

static void on_values(void *arg, int status, void *result)
{
	struct lookup *lk = arg;
	struct ferry__sched_client *c = lk->c;
	struct ferry_gcs_bytes *values = result;

	ferry__free(lk);
	if (!c) {
		ferry_gcs_free(result);
		return;
	}
	c->lookup = NULL;
	c->ninst = 0;
	for (int i = 0; i < status && c->ninst < INSTANCES_MAX; i++)
		if (values[i].data &&
		    parse_instance(values[i].data, values[i].size, &c->inst[c->ninst]) == 0)
			c->ninst++;
	ferry_gcs_free(result);
	lookup_done(c, status < 0 ? status : 0);
}

static void on_keys(void *arg, int status, void *result)
{
	struct lookup *lk = arg;
	struct ferry__sched_client *c = lk->c;
	struct ferry_gcs_bytes *keys = result;
	int ret;

	if (!c || status <= 0) {
		ferry__free(lk);
		ferry_gcs_free(result);
		if (c) {
			c->lookup = NULL;
			c->ninst = 0;
			lookup_done(c, status);
		}
		return;
	}
	ret = ferry_gcs_kv_multi_get_async(
		c->gcs, c->ns, strlen(c->ns), keys,
		(size_t)(status < INSTANCES_MAX ? status : INSTANCES_MAX), on_values, lk);
	ferry_gcs_free(result);
	if (ret < 0) {
		ferry__free(lk);
		c->lookup = NULL;
		c->ninst = 0;
		lookup_done(c, ret);
	}
}

static void start_lookup(struct ferry__sched_client *c)
{
	struct lookup *lk;
	int ret;

	if (c->lookup)
		return;
	lk = ferry__malloc(sizeof(*lk));
	if (!lk) {
		fail_all(c, -ENOMEM);
		return;
	}
	lk->c = c;
	ret = ferry_gcs_kv_keys_async(c->gcs, c->ns, strlen(c->ns), "", 0, on_keys, lk);
	if (ret < 0) {
		ferry__free(lk);
		FLOG_WARN(COMP, "reading the ferry-sched instances: %s", ferry_strerror(-ret));
		fail_all(c, -EHOSTUNREACH);
		return;
	}
	c->lookup = lk;
}

static void on_retry(struct ferry__loop_timer *t, int status)
{
	struct ferry__sched_client *c = t->data;

	c->pausing = false;
	if (status == 0 && c->unsent.head)
		start_lookup(c);
}

/* The next attempt: the next instance of this round, or the end of the round. */
static void connect_next(struct ferry__sched_client *c)
{
	if (c->conn || c->lookup || c->pausing)
		return;
	while (c->tried < c->ninst) {
		const struct instance *in = &c->inst[c->cursor];
		int ret;

		c->cursor = (c->cursor + 1) % c->ninst;
		c->tried++;
		c->up = false;
		ret = dial(c, in);
		if (ret == 0)
			return;
		c->conn = NULL;
		FLOG_INFO(COMP, "ferry-sched %s:%u: %s", in->host, in->port, ferry_strerror(-ret));
	}
	/* A round ended with no instance answering (or none registered). */
	if (++c->round > c->rounds) {
		FLOG_WARN(COMP,
			  "no ferry-sched instance answered (%u registered): the node keeps "
			  "its tasks",
			  c->ninst);
		c->round = 0;
		c->tried = 0;
		c->ninst = 0;
		fail_all(c, -EHOSTUNREACH);
		return;
	}
	c->pausing = true;
	ferry__loop_timer_start(c->loop, &c->retry,
				c->round == 1 && c->ninst == 0 ? 0 : c->retry_pause_ms, 0,
				on_retry);
}

/* ---- sending ---- */

static size_t item_bytes(const struct pend *p)
{
	return 96 + p->req.nres * 96 + p->req.ninputs * 48;
}

static int send_batch(struct ferry__sched_client *c, struct pend *first, size_t n)
{
	const struct ferry__sched_place_req **items = ferry__calloc(n, sizeof(*items));
	uint64_t *ids = ferry__calloc(n, sizeof(*ids));
	struct pend *p = first;
	int ret = -ENOMEM;

	if (!items || !ids)
		goto out;
	for (size_t i = 0; i < n; i++, p = p->next) {
		items[i] = &p->req;
		ids[i] = p->wire_id;
	}
	ret = ferry__sched_place_build(&c->fb, &c->self, items, ids, n);
	if (ret == 0)
		ret = ferry__conn_send(c->conn, FERRY__WIRE_MSG_SCHED_PLACE,
				       ferry__fb_builder_data(&c->fb),
				       ferry__fb_builder_size(&c->fb));
out:
	ferry__free(ids);
	ferry__free(items);
	return ret;
}

static void send_unsent(struct ferry__sched_client *c)
{
	uint64_t now = ferry__loop_now_ms();

	while (c->conn && c->up && c->unsent.head) {
		struct pend *first = c->unsent.head, *p = first;
		size_t n = 0, bytes = 0;
		int ret;

		while (p && n < FERRY__SCHED_BATCH_MAX &&
		       (n == 0 || bytes + item_bytes(p) <= BATCH_BYTES_MAX)) {
			bytes += item_bytes(p);
			n++;
			p = p->next;
		}
		ret = send_batch(c, first, n);
		if (ret < 0) {
			FLOG_WARN(COMP, "sending %zu requests to ferry-sched: %s", n,
				  ferry_strerror(-ret));
			ferry__conn_close(c->conn); /* its on_close requeues and fails over */
			return;
		}
		for (size_t i = 0; i < n; i++) {
			p = c->unsent.head;
			plist_del(&c->unsent, p);
			p->sent = true;
			p->sent_ms = now;
			plist_push(&c->sent, p);
		}
	}
	if (c->sent.head && !c->tick.active)
		ferry__loop_timer_start(c->loop, &c->tick, c->reply_timeout_ms / 4 + 1,
					c->reply_timeout_ms / 4 + 1, on_tick);
}

static void on_flush(struct ferry__loop_timer *t, int status)
{
	struct ferry__sched_client *c = t->data;

	if (status < 0)
		return;
	if (c->conn)
		send_unsent(c);
	else
		connect_next(c);
}

static void on_tick(struct ferry__loop_timer *t, int status)
{
	struct ferry__sched_client *c = t->data;
	struct pend *oldest = c->sent.head;

	if (status < 0)
		return;
	if (!oldest) {
		ferry__loop_timer_stop(t);
		return;
	}
	if (c->conn && ferry__loop_now_ms() - oldest->sent_ms >= c->reply_timeout_ms) {
		FLOG_WARN(COMP, "ferry-sched %s: no reply in %u ms, trying another instance",
			  ferry__conn_peer(c->conn), c->reply_timeout_ms);
		ferry__conn_close(c->conn);
	}
}

/* ---- the API ---- */

int ferry__sched_client_new(struct ferry__loop *loop, struct ferry_gcs_client *gcs,
			    const void *token, size_t token_len, const struct ferry_node_id *self,
			    struct ferry__sched_client **out)
{
	struct ferry__sched_client *c;

	if (!loop || !gcs || !token || !token_len || token_len > sizeof(c->token) || !self || !out)
		return -EINVAL;
	c = ferry__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->gcs = gcs;
	memcpy(c->token, token, token_len);
	c->token_len = token_len;
	c->self = *self;
	ferry__hashmap_init(&c->by_id, sizeof(uint64_t), sizeof(struct pend *));
	ferry__hashmap_init(&c->by_wire, sizeof(uint64_t), sizeof(struct pend *));
	ferry__fb_builder_init(&c->fb);
	c->flush.data = c;
	c->tick.data = c;
	c->retry.data = c;
	c->reply_timeout_ms = DEFAULT_REPLY_TIMEOUT_MS;
	c->retry_pause_ms = DEFAULT_RETRY_PAUSE_MS;
	c->rounds = DEFAULT_ROUNDS;
	snprintf(c->ns, sizeof(c->ns), "%s", FERRY__SCHED_KV_NS);
	*out = c;
	return 0;
}

void ferry__sched_client_set_timing(struct ferry__sched_client *c, unsigned reply_timeout_ms,
				    unsigned retry_pause_ms, unsigned rounds)
{
	if (reply_timeout_ms)
		c->reply_timeout_ms = reply_timeout_ms;
	if (retry_pause_ms)
		c->retry_pause_ms = retry_pause_ms;
	if (rounds)
		c->rounds = rounds;
}

int ferry__sched_client_set_namespace(struct ferry__sched_client *c, const char *ns)
{
	if (!ns || !ns[0] || strlen(ns) >= sizeof(c->ns))
		return -EINVAL;
	snprintf(c->ns, sizeof(c->ns), "%s", ns);
	return 0;
}

unsigned ferry__sched_client_hops(const struct ferry__sched_client *c)
{
	return c->hops;
}

size_t ferry__sched_client_outstanding(const struct ferry__sched_client *c)
{
	return ferry__hashmap_count(&c->by_id);
}

static struct pend *pend_new(const struct ferry__sched_place_req *req)
{
	size_t ninputs = req->ninputs < FERRY__SCHED_ITEM_INPUTS_MAX ? req->ninputs
								     : FERRY__SCHED_ITEM_INPUTS_MAX;
	struct pend *p = ferry__calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (ninputs) {
		p->inputs = ferry__calloc(ninputs, sizeof(*p->inputs));
		if (!p->inputs) {
			ferry__free(p);
			return NULL;
		}
		memcpy(p->inputs, req->inputs, ninputs * sizeof(*p->inputs));
	}
	memcpy(p->res, req->res, req->nres * sizeof(*p->res));
	p->req = *req;
	p->req.res = p->res;
	p->req.inputs = p->inputs;
	p->req.ninputs = ninputs;
	snprintf(p->from_group, sizeof(p->from_group), "%s",
		 req->from_group ? req->from_group : "");
	p->req.from_group = p->from_group;
	return p;
}

static int check_req(const struct ferry__sched_place_req *req)
{
	if (req->nres > FERRY__SCHED_ITEM_RES_MAX || (req->nres && !req->res) ||
	    (req->ninputs && !req->inputs) || req->strategy < FERRY__SCHED_DEFAULT ||
	    req->strategy > FERRY__SCHED_NODE_AFFINITY || req->hops > FERRY__SCHED_HOPS_MAX ||
	    (req->from_group && strlen(req->from_group) > FERRY__SCHED_GROUP_NAME_MAX))
		return -EINVAL;
	for (size_t i = 0; i < req->nres; i++)
		if (req->res[i].amount <= 0 || !req->res[i].name[0] ||
		    strnlen(req->res[i].name, sizeof(req->res[i].name)) > FERRY__RES_NAME_MAX)
			return -EINVAL;
	return 0;
}

int ferry__sched_client_place(struct ferry__sched_client *c,
			      const struct ferry__sched_place_req *req, ferry__sched_place_fn cb,
			      void *arg)
{
	struct pend *p, **slot;
	int ret;

	if (!c || !req || !cb || check_req(req) < 0) {
		FLOG_WARN(COMP, "place: malformed request (%zu resources, strategy %d)",
			  req ? req->nres : 0, req ? req->strategy : -1);
		return -EINVAL;
	}
	if (c->freeing)
		return -ECANCELED;
	if (ferry__hashmap_get(&c->by_id, &req->id)) {
		FLOG_WARN(COMP, "place: request %llu is already outstanding",
			  (unsigned long long)req->id);
		return -EINVAL;
	}
	p = pend_new(req);
	if (!p)
		return -ENOMEM;
	p->id = req->id;
	p->wire_id = ++c->next_wire_id;
	p->cb = cb;
	p->arg = arg;
	ret = ferry__hashmap_put(&c->by_id, &p->id, (void **)&slot);
	if (ret < 0)
		goto err_free;
	*slot = p;
	ret = ferry__hashmap_put(&c->by_wire, &p->wire_id, (void **)&slot);
	if (ret < 0)
		goto err_unmap;
	*slot = p;
	plist_push(&c->unsent, p);
	if (!c->flush.active)
		ferry__loop_timer_start(c->loop, &c->flush, 0, 0, on_flush);
	return 0;
err_unmap:
	ferry__hashmap_remove(&c->by_id, &p->id, NULL);
err_free:
	pend_free(p);
	return ret;
}

int ferry__sched_client_cancel(struct ferry__sched_client *c, uint64_t id)
{
	struct pend **slot = ferry__hashmap_get(&c->by_id, &id);
	struct pend *p;

	if (!slot)
		return -ENOENT;
	p = *slot;
	pend_unlink(c, p);
	pend_free(p);
	return 0;
}

void ferry__sched_client_free(struct ferry__sched_client *c)
{
	if (!c)
		return;
	c->freeing = true;
	ferry__loop_timer_stop(&c->flush);
	ferry__loop_timer_stop(&c->tick);
	ferry__loop_timer_stop(&c->retry);
	if (c->lookup)
		c->lookup->c = NULL;
	if (c->conn) {
		ferry__conn_set_callbacks(c->conn, &orphan_cb, NULL);
		ferry__conn_close(c->conn);
		c->conn = NULL;
	}
	fail_all(c, -ECANCELED);
	ferry__hashmap_fini(&c->by_id);
	ferry__hashmap_fini(&c->by_wire);
	ferry__fb_builder_fini(&c->fb);
	ferry__free(c);
}
