/* SPDX-License-Identifier: Apache-2.0 */
/* GCS pub/sub engine: sequence numbers, fan-out, bounded queues and history, resync, resume. */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/pubsub.h"

/* What one queued message costs a subscriber's bound besides its payload. */
#define MSG_OVERHEAD (sizeof(struct ferry__ps_msg) + sizeof(void *))

/* A scope's identity: channel and key (size 0 = whole channel), zero-padded for hashing. Its
 * size is a multiple of 8 so that the hash map keeps the pointer stored after it aligned. */
struct ikey {
	uint8_t channel;		  /* enum ferry_gcs_channel */
	uint8_t size;			  /* key bytes, 0 = whole channel */
	uint8_t bytes[FERRY__PS_KEY_MAX]; /* key */
	uint8_t pad[2];			  /* zero */
};

/* One subscription of one subscriber. */
struct scope {
	struct ferry__ps_sub *sub; /* owner */
	struct ikey ikey;	   /* what it matches */
	struct scope *prev;	   /* engine list (key's or channel's whole list) */
	struct scope *next;	   /* engine list */
	bool need_snapshot;	   /* key scope waiting for RESYNC + snapshot */
};

enum mode {
	MODE_LIVE = 0,	  /* deltas queued as published */
	MODE_CATCHUP = 1, /* next drain replays history after catchup_from */
	MODE_RESYNC = 2,  /* next drain sends RESYNC + snapshot for every scope */
};

/* A subscriber's view of one channel. */
struct sub_channel {
	uint32_t scopes;	/* scopes on this channel, the whole one included */
	struct scope *whole;	/* the whole-channel scope, or NULL */
	uint8_t mode;		/* enum mode */
	uint64_t catchup_from;	/* MODE_CATCHUP: the last seq the subscriber had */
	uint32_t key_snapshots; /* key scopes with need_snapshot */
};

/* A growable array of message references. */
struct msgvec {
	struct ferry__ps_msg **msgs; /* references held */
	size_t count;		     /* in use */
	size_t cap;		     /* allocated */
};

struct ferry__ps_sub {
	struct ferry__ps *ps;			   /* engine */
	struct ferry__ps_sub_opts opts;		   /* limits (defaults filled in), ready callback */
	struct ferry__hashmap scopes;		   /* struct ikey -> struct scope * */
	struct sub_channel ch[FERRY_GCS_CH_COUNT]; /* per channel */
	struct ferry__ps_msg **queue;		   /* ring of queued deltas */
	size_t qhead;				   /* ring: oldest */
	size_t qcount;				   /* ring: queued */
	size_t qcap;				   /* ring: slots */
	size_t buffered_bytes;			   /* payload + overhead queued */
	bool notified;				   /* ready fired since the last drain */
	uint64_t delivered;			   /* messages drained */
	uint64_t resyncs;			   /* bound overflows */
	struct ferry__ps_sub *prev;		   /* engine's subscriber list */
	struct ferry__ps_sub *next;		   /* engine's subscriber list */
};

struct channel {
	uint64_t seq;		     /* last seq published */
	struct scope *whole;	     /* whole-channel scopes */
	struct ferry__ps_msg **hist; /* ring of the newest messages */
	size_t hhead;		     /* ring: oldest */
	size_t hcount;		     /* ring: held */
	size_t hcap;		     /* ring: slots */
	size_t hbytes;		     /* payload bytes held */
	uint64_t hist_first;	     /* seq of the oldest held (seq + 1 when empty) */
};

struct ferry__ps {
	struct ferry__ps_opts opts;	       /* defaults filled in */
	uint64_t epoch;			       /* this incarnation */
	struct channel ch[FERRY_GCS_CH_COUNT]; /* per channel */
	struct ferry__hashmap keys;	       /* struct ikey -> head of its scope list */
	struct ferry__ps_sub *subs;	       /* every subscriber */
};

struct ferry__ps_snap {
	struct ferry__ps *ps; /* engine (limits) */
	struct msgvec *out;   /* where items go */
	uint8_t channel;      /* channel being snapshotted */
	uint64_t seq;	      /* the snapshot's seq */
};

/* ---- messages ---- */

static struct ferry__ps_msg *msg_new(uint8_t kind, uint8_t channel, const void *key,
				     size_t key_size, uint64_t seq, const void *data, size_t size)
{
	struct ferry__ps_msg *m = ferry__malloc(sizeof(*m) + size);

	if (!m)
		return NULL;
	memset(m, 0, sizeof(*m));
	m->refs = 1;
	m->kind = kind;
	m->channel = channel;
	m->key_size = (uint8_t)key_size;
	if (key_size)
		memcpy(m->key, key, key_size);
	m->seq = seq;
	m->size = (uint32_t)size;
	if (size)
		memcpy(m->data, data, size);
	return m;
}

static struct ferry__ps_msg *msg_ref(struct ferry__ps_msg *m)
{
	m->refs++;
	return m;
}

static void msg_unref(struct ferry__ps_msg *m)
{
	if (m && --m->refs == 0)
		ferry__free(m);
}

static int vec_push(struct msgvec *v, struct ferry__ps_msg *m)
{
	if (v->count == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 16;
		struct ferry__ps_msg **p = ferry__realloc(v->msgs, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		v->msgs = p;
		v->cap = cap;
	}
	v->msgs[v->count++] = m;
	return 0;
}

static void vec_release(struct msgvec *v)
{
	for (size_t i = 0; i < v->count; i++)
		msg_unref(v->msgs[i]);
	ferry__free(v->msgs);
	memset(v, 0, sizeof(*v));
}

static int check_scope(enum ferry_gcs_channel channel, const void *key, size_t key_size)
{
	if ((unsigned)channel >= FERRY_GCS_CH_COUNT || key_size > FERRY__PS_KEY_MAX ||
	    (key_size && !key)) {
		FLOG_WARN("gcs", "pubsub: unknown channel %d or bad key (%zu bytes, limit %d)",
			  (int)channel, key_size, FERRY__PS_KEY_MAX);
		return -EINVAL;
	}
	return 0;
}

static struct ikey make_ikey(enum ferry_gcs_channel channel, const void *key, size_t key_size)
{
	struct ikey k;

	memset(&k, 0, sizeof(k));
	k.channel = (uint8_t)channel;
	k.size = (uint8_t)key_size;
	if (key_size)
		memcpy(k.bytes, key, key_size);
	return k;
}

/* ---- engine ---- */

int ferry__ps_create(const struct ferry__ps_opts *opts, struct ferry__ps **out)
{
	struct ferry__ps *ps = ferry__calloc(1, sizeof(*ps));

	if (!ps)
		return -ENOMEM;
	if (opts)
		ps->opts = *opts;
	if (!ps->opts.history_max_messages)
		ps->opts.history_max_messages = 4096;
	if (!ps->opts.history_max_bytes)
		ps->opts.history_max_bytes = 4u << 20;
	if (!ps->opts.max_message_bytes)
		ps->opts.max_message_bytes = 1u << 20;
	if (!ps->opts.max_subscriptions)
		ps->opts.max_subscriptions = 10000;
	if (!ps->opts.max_buffered_bytes)
		ps->opts.max_buffered_bytes = 8u << 20;
	ps->epoch = ps->opts.epoch;
	while (ps->epoch == 0)
		ferry_id_random(&ps->epoch, sizeof(ps->epoch));
	for (int i = 0; i < FERRY_GCS_CH_COUNT; i++)
		ps->ch[i].hist_first = 1;
	ferry__hashmap_init(&ps->keys, sizeof(struct ikey), sizeof(struct scope *));
	*out = ps;
	return 0;
}

static void history_clear(struct channel *ch)
{
	for (size_t i = 0; i < ch->hcount; i++)
		msg_unref(ch->hist[(ch->hhead + i) % ch->hcap]);
	ch->hhead = ch->hcount = ch->hbytes = 0;
	ch->hist_first = ch->seq + 1;
}

void ferry__ps_destroy(struct ferry__ps *ps)
{
	if (!ps)
		return;
	while (ps->subs)
		ferry__ps_sub_destroy(ps->subs);
	for (int i = 0; i < FERRY_GCS_CH_COUNT; i++) {
		history_clear(&ps->ch[i]);
		ferry__free(ps->ch[i].hist);
	}
	ferry__hashmap_fini(&ps->keys);
	ferry__free(ps);
}

uint64_t ferry__ps_epoch(const struct ferry__ps *ps)
{
	return ps->epoch;
}

uint64_t ferry__ps_seq(const struct ferry__ps *ps, enum ferry_gcs_channel channel)
{
	return (unsigned)channel < FERRY_GCS_CH_COUNT ? ps->ch[channel].seq : 0;
}

static void history_pop(struct channel *ch)
{
	struct ferry__ps_msg *m = ch->hist[ch->hhead];

	ch->hbytes -= m->size;
	ch->hhead = (ch->hhead + 1) % ch->hcap;
	ch->hcount--;
	ch->hist_first++;
	msg_unref(m);
}

static int history_grow(struct ferry__ps *ps, struct channel *ch)
{
	size_t cap = FERRY_MIN(FERRY_MAX(ch->hcap * 2, (size_t)16), ps->opts.history_max_messages);
	struct ferry__ps_msg **hist = ferry__malloc(cap * sizeof(*hist));

	if (!hist)
		return -ENOMEM;
	for (size_t i = 0; i < ch->hcount; i++)
		hist[i] = ch->hist[(ch->hhead + i) % ch->hcap];
	ferry__free(ch->hist);
	ch->hist = hist;
	ch->hcap = cap;
	ch->hhead = 0;
	return 0;
}

/* Keep @m (the newest, seq == ch->seq) in the history within its bounds. When that is not
 * possible (too big, no memory) the history restarts after @m: resumes from before then will
 * get a snapshot, which is always correct. */
static void history_push(struct ferry__ps *ps, struct channel *ch, struct ferry__ps_msg *m)
{
	if (m->size > ps->opts.history_max_bytes) {
		history_clear(ch);
		return;
	}
	while (ch->hcount && (ch->hcount == ps->opts.history_max_messages ||
			      ch->hbytes + m->size > ps->opts.history_max_bytes))
		history_pop(ch);
	if (ch->hcount == ch->hcap && history_grow(ps, ch) < 0) {
		history_clear(ch);
		return;
	}
	ch->hist[(ch->hhead + ch->hcount) % ch->hcap] = msg_ref(m);
	ch->hcount++;
	ch->hbytes += m->size;
}

/* The message of @seq if the history holds it, else NULL. */
static struct ferry__ps_msg *history_get(const struct channel *ch, uint64_t seq)
{
	if (seq < ch->hist_first || seq - ch->hist_first >= ch->hcount)
		return NULL;
	return ch->hist[(ch->hhead + (seq - ch->hist_first)) % ch->hcap];
}

/* Can a subscriber that saw up to @last_seq of @epoch catch up from the history alone? */
static bool history_covers(const struct ferry__ps *ps, const struct channel *ch, uint64_t epoch,
			   uint64_t last_seq)
{
	return epoch == ps->epoch && last_seq <= ch->seq && last_seq + 1 >= ch->hist_first;
}

/* ---- subscribers: queue ---- */

/* Tell the owner once that a drain has something. Not when nothing is pending (a key subscribed
 * under the subscriber's whole-channel scope needs no snapshot): the owner would not drain, and
 * `notified` would stay set, silencing every later delta. */
static void notify_ready(struct ferry__ps_sub *sub)
{
	if (sub->notified || !ferry__ps_pending(sub))
		return;
	sub->notified = true;
	if (sub->opts.ready)
		sub->opts.ready(sub->opts.arg, sub);
}

static struct ferry__ps_msg **queue_slot(const struct ferry__ps_sub *sub, size_t i)
{
	return &sub->queue[(sub->qhead + i) % sub->qcap];
}

static void queue_clear(struct ferry__ps_sub *sub)
{
	for (size_t i = 0; i < sub->qcount; i++)
		msg_unref(*queue_slot(sub, i));
	sub->qhead = sub->qcount = 0;
	sub->buffered_bytes = 0;
}

static int queue_grow(struct ferry__ps_sub *sub)
{
	size_t cap = sub->qcap ? sub->qcap * 2 : 64;
	struct ferry__ps_msg **q = ferry__malloc(cap * sizeof(*q));

	if (!q)
		return -ENOMEM;
	for (size_t i = 0; i < sub->qcount; i++)
		q[i] = *queue_slot(sub, i);
	ferry__free(sub->queue);
	sub->queue = q;
	sub->qcap = cap;
	sub->qhead = 0;
	return 0;
}

/* The queue cannot take more: drop it and resync every channel of @sub on its next drain. */
static void overflow(struct ferry__ps_sub *sub, const char *why)
{
	FLOG_WARN("gcs",
		  "pubsub: subscriber %p: %s with %zu messages (%zu bytes) queued; "
		  "dropping them, resync",
		  (void *)sub, why, sub->qcount, sub->buffered_bytes);
	queue_clear(sub);
	for (int i = 0; i < FERRY_GCS_CH_COUNT; i++)
		if (sub->ch[i].scopes)
			sub->ch[i].mode = MODE_RESYNC;
	sub->resyncs++;
	notify_ready(sub);
}

static void deliver(struct ferry__ps_sub *sub, struct ferry__ps_msg *m)
{
	size_t cost = m->size + MSG_OVERHEAD;

	if (sub->ch[m->channel].mode != MODE_LIVE)
		return; /* the coming catch-up or snapshot covers it */
	if (sub->buffered_bytes + cost > sub->opts.max_buffered_bytes) {
		overflow(sub, "over its bound");
		return;
	}
	if (sub->qcount == sub->qcap && queue_grow(sub) < 0) {
		overflow(sub, "out of memory");
		return;
	}
	*queue_slot(sub, sub->qcount) = msg_ref(m);
	sub->qcount++;
	sub->buffered_bytes += cost;
	notify_ready(sub);
}

int ferry__ps_publish(struct ferry__ps *ps, enum ferry_gcs_channel channel, const void *key,
		      size_t key_size, const void *data, size_t size, uint64_t *seq)
{
	struct channel *ch;
	struct ferry__ps_msg *m;
	struct ikey ik;
	struct scope **head;
	int ret = check_scope(channel, key, key_size);

	if (ret < 0)
		return ret;
	if (size > ps->opts.max_message_bytes || (size && !data)) {
		FLOG_WARN("gcs", "pubsub: message of %zu bytes (limit %zu)", size,
			  ps->opts.max_message_bytes);
		return -E2BIG;
	}
	ch = &ps->ch[channel];
	m = msg_new(FERRY__PS_DELTA, (uint8_t)channel, key, key_size, ch->seq + 1, data, size);
	if (!m)
		return -ENOMEM;
	ch->seq++;
	history_push(ps, ch, m);
	for (struct scope *s = ch->whole; s; s = s->next)
		deliver(s->sub, m);
	if (key_size) {
		ik = make_ikey(channel, key, key_size);
		head = ferry__hashmap_get(&ps->keys, &ik);
		for (struct scope *s = head ? *head : NULL; s; s = s->next) {
			/* A whole-channel scope of the same subscriber already took it. */
			if (!s->sub->ch[channel].whole && !s->need_snapshot)
				deliver(s->sub, m);
		}
	}
	if (seq)
		*seq = m->seq;
	msg_unref(m);
	return 0;
}

/* ---- subscribers: scopes ---- */

int ferry__ps_sub_create(struct ferry__ps *ps, const struct ferry__ps_sub_opts *opts,
			 struct ferry__ps_sub **out)
{
	struct ferry__ps_sub *sub = ferry__calloc(1, sizeof(*sub));

	if (!sub)
		return -ENOMEM;
	sub->ps = ps;
	if (opts)
		sub->opts = *opts;
	if (!sub->opts.max_subscriptions)
		sub->opts.max_subscriptions = ps->opts.max_subscriptions;
	if (!sub->opts.max_buffered_bytes)
		sub->opts.max_buffered_bytes = ps->opts.max_buffered_bytes;
	ferry__hashmap_init(&sub->scopes, sizeof(struct ikey), sizeof(struct scope *));
	sub->next = ps->subs;
	if (ps->subs)
		ps->subs->prev = sub;
	ps->subs = sub;
	*out = sub;
	return 0;
}

/* Link @s into the engine: the channel's whole list, or its key's list (may need memory). */
static int engine_link(struct ferry__ps *ps, struct scope *s)
{
	struct scope **head;
	int ret;

	if (s->ikey.size == 0) {
		head = &ps->ch[s->ikey.channel].whole;
	} else {
		ret = ferry__hashmap_put(&ps->keys, &s->ikey, (void **)&head);
		if (ret < 0)
			return ret;
		if (ret)
			*head = NULL;
	}
	s->prev = NULL;
	s->next = *head;
	if (s->next)
		s->next->prev = s;
	*head = s;
	return 0;
}

static void engine_unlink(struct ferry__ps *ps, struct scope *s)
{
	struct scope **head;

	if (s->next)
		s->next->prev = s->prev;
	if (s->prev) {
		s->prev->next = s->next;
		return;
	}
	if (s->ikey.size == 0) {
		ps->ch[s->ikey.channel].whole = s->next;
		return;
	}
	if (s->next) {
		head = ferry__hashmap_get(&ps->keys, &s->ikey);
		*head = s->next;
		return;
	}
	ferry__hashmap_remove(&ps->keys, &s->ikey, NULL);
}

/* A new scope was added to @c: does it start with a snapshot? */
static void want_snapshot(struct ferry__ps_sub *sub, struct sub_channel *c, struct scope *s)
{
	if (c->mode == MODE_RESYNC)
		return; /* already covered */
	if (s->ikey.size == 0) {
		c->mode = MODE_RESYNC;
	} else if (!c->whole) {
		s->need_snapshot = true;
		c->key_snapshots++;
	}
	notify_ready(sub);
}

int ferry__ps_subscribe(struct ferry__ps_sub *sub, enum ferry_gcs_channel channel, const void *key,
			size_t key_size, unsigned flags)
{
	struct ikey ik;
	struct scope *s, **slot;
	struct sub_channel *c;
	int ret = check_scope(channel, key, key_size);

	if (ret < 0)
		return ret;
	ik = make_ikey(channel, key, key_size);
	if (ferry__hashmap_get(&sub->scopes, &ik))
		return 0;
	if (ferry__hashmap_count(&sub->scopes) >= sub->opts.max_subscriptions)
		return -ENOSPC; /* logged by the server, which names the peer (once) */
	s = ferry__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->sub = sub;
	s->ikey = ik;
	ret = ferry__hashmap_put(&sub->scopes, &ik, (void **)&slot);
	if (ret < 0)
		goto err_free_scope;
	*slot = s;
	ret = engine_link(sub->ps, s);
	if (ret < 0)
		goto err_forget_scope;
	c = &sub->ch[channel];
	c->scopes++;
	if (key_size == 0)
		c->whole = s;
	if (flags & FERRY__PS_WANT_SNAPSHOT)
		want_snapshot(sub, c, s);
	return 1;

err_forget_scope:
	ferry__hashmap_remove(&sub->scopes, &ik, NULL);
err_free_scope:
	ferry__free(s);
	return ret;
}

static void drop_scope(struct ferry__ps_sub *sub, struct scope *s)
{
	struct sub_channel *c = &sub->ch[s->ikey.channel];

	engine_unlink(sub->ps, s);
	c->scopes--;
	if (c->whole == s)
		c->whole = NULL;
	if (s->need_snapshot)
		c->key_snapshots--;
	if (c->scopes == 0) {
		c->mode = MODE_LIVE;
		c->key_snapshots = 0;
	}
	ferry__free(s);
}

int ferry__ps_unsubscribe(struct ferry__ps_sub *sub, enum ferry_gcs_channel channel,
			  const void *key, size_t key_size)
{
	struct ikey ik;
	struct scope *s;
	int ret = check_scope(channel, key, key_size);

	if (ret < 0)
		return ret;
	ik = make_ikey(channel, key, key_size);
	if (ferry__hashmap_remove(&sub->scopes, &ik, &s) < 0)
		return -ENOENT;
	drop_scope(sub, s);
	return 0;
}

void ferry__ps_sub_destroy(struct ferry__ps_sub *sub)
{
	struct ferry__ps *ps;
	size_t cursor = 0;
	void *key, *value;

	if (!sub)
		return;
	ps = sub->ps;
	while (ferry__hashmap_next(&sub->scopes, &cursor, &key, &value))
		drop_scope(sub, *(struct scope **)value);
	ferry__hashmap_fini(&sub->scopes);
	queue_clear(sub);
	ferry__free(sub->queue);
	if (sub->prev)
		sub->prev->next = sub->next;
	else
		ps->subs = sub->next;
	if (sub->next)
		sub->next->prev = sub->prev;
	ferry__free(sub);
}

/* Drop the queued messages of @channel, keeping the others in order. */
static void queue_drop_channel(struct ferry__ps_sub *sub, uint8_t channel)
{
	size_t kept = 0;

	for (size_t i = 0; i < sub->qcount; i++) {
		struct ferry__ps_msg *m = *queue_slot(sub, i);

		if (m->channel == channel) {
			sub->buffered_bytes -= m->size + MSG_OVERHEAD;
			msg_unref(m);
			continue;
		}
		*queue_slot(sub, kept++) = m;
	}
	sub->qcount = kept;
}

int ferry__ps_resume(struct ferry__ps_sub *sub, enum ferry_gcs_channel channel, uint64_t epoch,
		     uint64_t last_seq)
{
	struct sub_channel *c;
	int ret = check_scope(channel, NULL, 0);

	if (ret < 0)
		return ret;
	c = &sub->ch[channel];
	if (c->scopes == 0)
		return -ENOENT;
	queue_drop_channel(sub, (uint8_t)channel);
	if (history_covers(sub->ps, &sub->ps->ch[channel], epoch, last_seq)) {
		c->mode = MODE_CATCHUP;
		c->catchup_from = last_seq;
		ret = 0;
	} else {
		FLOG_INFO("gcs",
			  "pubsub: resume of channel %d from seq %llu (epoch %s) needs a "
			  "snapshot",
			  (int)channel, (unsigned long long)last_seq,
			  epoch == sub->ps->epoch ? "same" : "other");
		c->mode = MODE_RESYNC;
		ret = 1;
	}
	notify_ready(sub);
	return ret;
}

/* ---- drain ---- */

/* Does history message @m belong to one of @sub's scopes (that is not awaiting a snapshot)? */
static bool matches(const struct ferry__ps_sub *sub, const struct ferry__ps_msg *m)
{
	const struct sub_channel *c = &sub->ch[m->channel];
	struct scope **s;
	struct ikey ik;

	if (c->whole)
		return true;
	if (!m->key_size)
		return false;
	ik = make_ikey(m->channel, m->key, m->key_size);
	s = ferry__hashmap_get(&sub->scopes, &ik);
	return s && !(*s)->need_snapshot;
}

static int push_ref(struct msgvec *out, struct ferry__ps_msg *m)
{
	int ret = vec_push(out, m);

	if (ret < 0)
		msg_unref(m);
	return ret;
}

/* RESYNC marker for the scope @ik, the snapshot items, then SNAPSHOT_END, all at the channel's
 * current seq. */
static int resync_scope(struct ferry__ps_sub *sub, const struct ikey *ik, struct msgvec *out)
{
	struct ferry__ps *ps = sub->ps;
	uint64_t seq = ps->ch[ik->channel].seq;
	struct ferry__ps_snap snap = {ps, out, ik->channel, seq};
	struct ferry__ps_msg *m;
	int ret;

	m = msg_new(FERRY__PS_RESYNC, ik->channel, ik->bytes, ik->size, seq, NULL, 0);
	if (!m)
		return -ENOMEM;
	ret = push_ref(out, m);
	if (ret == 0 && ps->opts.snapshot)
		ret = ps->opts.snapshot(ps->opts.snapshot_arg, &snap,
					(enum ferry_gcs_channel)ik->channel,
					ik->size ? ik->bytes : NULL, ik->size);
	if (ret < 0)
		return ret;
	/* The end, so that an empty snapshot ("no such record yet") is an answer too. */
	m = msg_new(FERRY__PS_SNAPSHOT_END, ik->channel, ik->bytes, ik->size, seq, NULL, 0);
	if (!m)
		return -ENOMEM;
	return push_ref(out, m);
}

/* Key scopes of @channel: every one when @all, else those waiting for a snapshot. */
static int resync_keys(struct ferry__ps_sub *sub, uint8_t channel, bool all, struct msgvec *out)
{
	size_t cursor = 0;
	void *key, *value;

	while (ferry__hashmap_next(&sub->scopes, &cursor, &key, &value)) {
		struct scope *s = *(struct scope **)value;
		int ret;

		if (s->ikey.channel != channel || s->ikey.size == 0 || !(all || s->need_snapshot))
			continue;
		ret = resync_scope(sub, &s->ikey, out);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* What a drain adds for @channel beyond the queue: history replay, markers, snapshots. */
static int collect_channel(struct ferry__ps_sub *sub, uint8_t channel, struct msgvec *out)
{
	struct sub_channel *c = &sub->ch[channel];
	struct channel *ch = &sub->ps->ch[channel];
	uint8_t mode = c->mode;
	int ret;

	/* The history may have moved on since the resume. */
	if (mode == MODE_CATCHUP && !history_covers(sub->ps, ch, sub->ps->epoch, c->catchup_from))
		mode = MODE_RESYNC;
	if (mode == MODE_CATCHUP) {
		for (uint64_t seq = c->catchup_from + 1; seq <= ch->seq; seq++) {
			struct ferry__ps_msg *m = history_get(ch, seq);

			/* Never NULL: history_covers() checked the range. */
			if (m && matches(sub, m) && (ret = push_ref(out, msg_ref(m))) < 0)
				return ret;
		}
	}
	if (mode == MODE_RESYNC && c->whole)
		return resync_scope(sub, &c->whole->ikey, out);
	if (mode != MODE_RESYNC && !c->key_snapshots)
		return 0;
	return resync_keys(sub, channel, mode == MODE_RESYNC, out);
}

static bool channel_pending(const struct sub_channel *c)
{
	return c->scopes && (c->mode != MODE_LIVE || c->key_snapshots);
}

/* After a successful drain every channel is live and complete up to its current seq. */
static void settle_channels(struct ferry__ps_sub *sub)
{
	bool flags = false;
	size_t cursor = 0;
	void *key, *value;

	for (int i = 0; i < FERRY_GCS_CH_COUNT; i++) {
		flags |= sub->ch[i].key_snapshots != 0;
		sub->ch[i].mode = MODE_LIVE;
		sub->ch[i].key_snapshots = 0;
	}
	while (flags && ferry__hashmap_next(&sub->scopes, &cursor, &key, &value))
		(*(struct scope **)value)->need_snapshot = false;
}

int ferry__ps_drain(struct ferry__ps_sub *sub, struct ferry__ps_batch *batch)
{
	struct msgvec extra = {0};
	struct ferry__ps_msg **msgs = NULL;
	size_t total, n = 0;
	int ret;

	memset(batch, 0, sizeof(*batch));
	for (uint8_t i = 0; i < FERRY_GCS_CH_COUNT; i++) {
		if (!channel_pending(&sub->ch[i]))
			continue;
		ret = collect_channel(sub, i, &extra);
		if (ret < 0)
			goto err_release_extra;
	}
	total = sub->qcount + extra.count;
	if (total) {
		msgs = ferry__malloc(total * sizeof(*msgs));
		if (!msgs) {
			ret = -ENOMEM;
			goto err_release_extra;
		}
	}
	/* Nothing can fail from here on: hand the references over. */
	for (size_t i = 0; i < sub->qcount; i++)
		msgs[n++] = *queue_slot(sub, i);
	for (size_t i = 0; i < extra.count; i++)
		msgs[n++] = extra.msgs[i];
	ferry__free(extra.msgs);
	sub->qhead = sub->qcount = 0;
	sub->buffered_bytes = 0;
	settle_channels(sub);
	sub->notified = false;
	sub->delivered += total;
	batch->msgs = msgs;
	batch->count = total;
	batch->epoch = sub->ps->epoch;
	for (size_t i = 0; i < total; i++)
		batch->bytes += msgs[i]->size;
	for (int i = 0; i < FERRY_GCS_CH_COUNT; i++)
		batch->watermarks[i] = sub->ch[i].scopes ? sub->ps->ch[i].seq : 0;
	return (int)FERRY_MIN(total, (size_t)INT32_MAX);

err_release_extra:
	vec_release(&extra);
	return ret;
}

bool ferry__ps_pending(const struct ferry__ps_sub *sub)
{
	if (sub->qcount)
		return true;
	for (int i = 0; i < FERRY_GCS_CH_COUNT; i++)
		if (channel_pending(&sub->ch[i]))
			return true;
	return false;
}

void ferry__ps_batch_release(struct ferry__ps_batch *batch)
{
	if (!batch)
		return;
	for (size_t i = 0; i < batch->count; i++)
		msg_unref(batch->msgs[i]);
	ferry__free(batch->msgs);
	memset(batch, 0, sizeof(*batch));
}

void ferry__ps_sub_stats(const struct ferry__ps_sub *sub, struct ferry__ps_sub_stats *out)
{
	out->buffered_bytes = sub->buffered_bytes;
	out->buffered_msgs = sub->qcount;
	out->delivered = sub->delivered;
	out->resyncs = sub->resyncs;
	out->subscriptions = ferry__hashmap_count(&sub->scopes);
}

int ferry__ps_snap_add(struct ferry__ps_snap *snap, const void *key, size_t key_size,
		       const void *data, size_t size)
{
	struct ferry__ps_msg *m;

	if (key_size > FERRY__PS_KEY_MAX || (key_size && !key) || (size && !data)) {
		FLOG_WARN("gcs", "pubsub: snapshot item with a bad key (%zu bytes)", key_size);
		return -EINVAL;
	}
	if (size > snap->ps->opts.max_message_bytes) {
		FLOG_WARN("gcs", "pubsub: snapshot item of %zu bytes (limit %zu)", size,
			  snap->ps->opts.max_message_bytes);
		return -E2BIG;
	}
	m = msg_new(FERRY__PS_SNAPSHOT, snap->channel, key, key_size, snap->seq, data, size);
	if (!m)
		return -ENOMEM;
	return push_ref(snap->out, m);
}
