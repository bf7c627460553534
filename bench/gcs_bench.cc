// SPDX-License-Identifier: Apache-2.0
// The GCS server: KV get/put ops/s with 1 and 50 clients, one request in flight or 16
// pipelined; pub/sub messages/s delivered to 1, 10 and 100 subscribers; publish-to-receive
// latency p50/p99. The server runs in this process on its own loop thread; clients are lean
// raw-socket clients driven as redis-benchmark drives its own: one thread, non-blocking sockets
// and epoll for all KV connections, each sending @depth requests then reading their replies,
// so the figures are the server's and the client side costs what Redis's does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

extern "C" {
#include "common/alloc.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/wire.h"
#include "gcs/ops.h"
#include "gcs/server.h"
}

namespace
{

const char kToken[] = "bench-token";

// The server on its own loop thread, for the life of the process.
struct Server {
	ferry__loop *loop = nullptr;
	ferry__gcs_server *srv = nullptr;
	uint16_t port = 0;
	std::thread thread;
	clockid_t cpu_clock = CLOCK_THREAD_CPUTIME_ID; // the loop thread's CPU clock
	std::atomic<bool> clock_ready{false};

	// @wal_dir: log every write there (group commit, replies after fdatasync), or nullptr.
	// @spin_us: the loop's busy-poll window; ferry-gcs's default unless told otherwise.
	explicit Server(const char *wal_dir = nullptr, unsigned spin_us = FERRY_GCS_SPIN_US)
	{
		ferry__gcs_server_opts o = {};

		ferry_log_configure("warn");
		o.token = kToken;
		o.token_len = sizeof(kToken) - 1;
		o.max_buffered_bytes = 64u << 20;
		o.wal_dir = wal_dir;
		ferry__loop_opts lo = {};

		lo.spin_us = spin_us;
		if (ferry__loop_create(&lo, &loop) < 0 ||
		    ferry__gcs_server_create(loop, &o, &srv) < 0)
			abort(); // a benchmark without its server has nothing to measure
		port = ferry__gcs_server_port(srv);
		thread = std::thread([this] {
			pthread_getcpuclockid(pthread_self(), &cpu_clock);
			clock_ready = true;
			ferry__loop_run(loop);
		});
		while (!clock_ready)
			std::this_thread::yield();
	}

	// CPU time the server's loop thread has used, ns. Throughput on a shared 2-core machine
	// swings with the neighbours' load; the server's CPU per request is what a change to the
	// server moves, so the KV and pub/sub runs report it beside their rates.
	uint64_t cpu_ns() const
	{
		timespec ts;

		clock_gettime(cpu_clock, &ts);
		return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
};

Server &server()
{
	static Server *s = new Server(); // never torn down: the process exits
	return *s;
}

// The same server with a loop that always sleeps (--spin-us 0), as Redis's does.
Server &server_sleeping()
{
	static Server *s = new Server(nullptr, 0);
	return *s;
}

std::string g_wal_dir;

int remove_entry(const char *path, const struct stat *, int, struct FTW *)
{
	return remove(path);
}

void remove_wal_dir()
{
	nftw(g_wal_dir.c_str(), remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

// A second server with a WAL in a fresh directory under $TMPDIR (default /tmp), removed at exit.
// bench/compare gives Redis's append-only file a directory on the same file system.
Server &server_wal()
{
	static Server *s = [] {
		const char *tmp = getenv("TMPDIR");
		std::string templ =
			std::string(tmp && *tmp ? tmp : "/tmp") + "/ferry-gcs-wal-XXXXXX";
		std::vector<char> buf(templ.begin(), templ.end());

		buf.push_back('\0');
		if (!mkdtemp(buf.data()))
			abort();
		g_wal_dir = buf.data();
		atexit(remove_wal_dir);
		return new Server(g_wal_dir.c_str());
	}();
	return *s;
}

// A blocking client socket speaking frames.
class Conn
{
      public:
	explicit Conn(uint16_t port)
	{
		sockaddr_in sa = {};
		int one = 1;

		fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sa.sin_family = AF_INET;
		sa.sin_port = htons(port);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (connect(fd_, (sockaddr *)&sa, sizeof(sa)) < 0)
			abort();
		setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ferry__frame_parser_init(&parser_, 64u << 20);
		ferry_id_random(id_.bytes, sizeof(id_.bytes));
		ferry__wire_handshake hs = {};
		hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
		hs.token = (const uint8_t *)kToken;
		hs.token_count = sizeof(kToken) - 1;
		ferry__wire_handshake_build(&fb_, &hs);
		queue(FERRY__WIRE_MSG_HANDSHAKE);
		flush();
		ferry__frame f;
		next(&f);
	}
	~Conn()
	{
		ferry__frame_parser_fini(&parser_);
		ferry__fb_builder_fini(&fb_);
		close(fd_);
	}
	ferry__fb_builder *builder()
	{
		return &fb_;
	}
	int fd() const
	{
		return fd_;
	}
	const ferry__wire_unique_id &id() const
	{
		return id_;
	}
	void set_nonblocking()
	{
		fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
	}
	// Write what the socket takes now; true when all of it left.
	bool flush_some()
	{
		while (sent_ < out_.size()) {
			ssize_t n = write(fd_, out_.data() + sent_, out_.size() - sent_);
			if (n < 0 && errno == EAGAIN)
				return false;
			if (n <= 0)
				abort();
			sent_ += (size_t)n;
		}
		out_.clear();
		sent_ = 0;
		return true;
	}
	// Read what is there now and count the complete frames in it.
	size_t read_frames()
	{
		ferry__frame f;
		size_t frames = 0;

		for (;;) {
			while (ferry__frame_parser_next(&parser_, &f) == 1)
				frames++;
			uint8_t *space;
			size_t size;

			if (ferry__frame_parser_space(&parser_, &space, &size) < 0)
				abort();
			ssize_t n = read(fd_, space, size);
			if (n < 0 && errno == EAGAIN)
				return frames;
			if (n <= 0)
				abort();
			ferry__frame_parser_commit(&parser_, (size_t)n);
			if ((size_t)n < size) { // drained: no read just to see EAGAIN (epoll is
				while (ferry__frame_parser_next(&parser_, &f) ==
				       1) // level-triggered)
					frames++;
				return frames;
			}
		}
	}
	// Append ready frames to the output.
	void queue_raw(const std::vector<uint8_t> &frames)
	{
		out_.insert(out_.end(), frames.begin(), frames.end());
	}
	// The output not written yet, taken.
	std::vector<uint8_t> take_out()
	{
		std::vector<uint8_t> v;

		v.swap(out_);
		return v;
	}
	// Append the message just built to the output.
	void queue(uint16_t type)
	{
		const uint8_t *frame;
		size_t size;

		ferry__frame_finish(&fb_, type, &frame, &size);
		out_.insert(out_.end(), frame, frame + size);
	}
	void flush()
	{
		size_t done = 0;

		while (done < out_.size()) {
			ssize_t n = write(fd_, out_.data() + done, out_.size() - done);
			if (n <= 0)
				abort();
			done += (size_t)n;
		}
		out_.clear();
	}
	// The next frame (blocking).
	void next(ferry__frame *f)
	{
		while (ferry__frame_parser_next(&parser_, f) != 1) {
			uint8_t *space;
			size_t size;

			if (ferry__frame_parser_space(&parser_, &space, &size) < 0)
				abort();
			ssize_t n = read(fd_, space, size);
			if (n <= 0)
				abort();
			ferry__frame_parser_commit(&parser_, (size_t)n);
		}
	}

      private:
	int fd_;
	ferry__wire_unique_id id_;
	ferry__frame_parser parser_;
	ferry__fb_builder fb_ = {};
	std::vector<uint8_t> out_;
	size_t sent_ = 0;
};

std::atomic<uint64_t> g_seq{1};
// Requests built for a template carry seqs from here: a byte pattern found nowhere else.
const uint64_t kSeqMark = 0x5eb1a5c0ffee0000ull;
thread_local uint64_t t_seq_override;

uint64_t next_seq()
{
	return t_seq_override ? t_seq_override++ : g_seq++;
}

void queue_op(Conn &c, const ferry__gcs_op &op)
{
	ferry__gcs_buf rec = {};
	ferry__gcs_writer w = {&rec, 0};
	ferry__wire_gcs_request m = {};

	ferry__gcs_op_encode(&op, &w);
	m.seq = next_seq();
	m.op = rec.data;
	m.op_count = rec.size;
	m.client = c.id(); // as the real client: the server deduplicates (client, seq)
	ferry__wire_gcs_request_build(c.builder(), &m);
	c.queue(FERRY__WIRE_MSG_GCS_REQUEST);
	ferry__gcs_buf_fini(&rec);
}

void queue_put(Conn &c, const std::string &key, const std::string &value)
{
	ferry__gcs_op op = {};

	op.type = FERRY__GCS_OP_KV_PUT;
	op.kv.key = {key.data(), key.size()};
	op.kv.value = {value.data(), value.size()};
	op.kv.overwrite = true;
	queue_op(c, op);
}

void queue_get(Conn &c, const std::string &key)
{
	ferry__wire_gcs_kv_get m = {};

	m.seq = next_seq();
	m.key = (const uint8_t *)key.data();
	m.key_count = key.size();
	ferry__wire_gcs_kv_get_build(c.builder(), &m);
	c.queue(FERRY__WIRE_MSG_GCS_KV_GET);
}

void queue_publish(Conn &c, uint64_t n)
{
	ferry__gcs_op op = {};

	op.type = FERRY__GCS_OP_ERROR;
	op.error.job.bytes[0] = 1;
	op.error.time_ms = n;
	op.error.type = "bench";
	op.error.message = "a 3-byte value in Redis, a small error record here";
	queue_op(c, op);
}

// A log line on the logs channel: Redis PUBLISH's counterpart (published, never stored), with
// the payload bench/compare gives redis-benchmark's PUBLISH.
void queue_log(Conn &c, uint64_t n)
{
	static const char payload[] = "a small error record payload";
	ferry__gcs_op op = {};

	(void)n;
	op.type = FERRY__GCS_OP_LOG;
	op.log.job.bytes[0] = 1;
	op.log.data.data = payload;
	op.log.data.size = sizeof(payload) - 1;
	queue_op(c, op);
}

// One KV connection of a run: @depth requests out, then their replies in. As redis-benchmark
// does, a batch is built once and resent; only the seqs are patched (in place, at the offsets
// where the template's marked seqs are), so every request is a new one for the server.
struct KvClient {
	std::unique_ptr<Conn> conn;
	std::string key;
	size_t left;		    // requests still to send
	size_t waiting;		    // replies still expected for the batch out
	std::vector<uint8_t> batch; // the template: depth requests
	std::vector<size_t> seq_at; // where each request's seq is in it
	bool out_watched;	    // EPOLLOUT is in its epoll registration
};

// Watch @k for writability only while part of its batch waits for socket space: one
// epoll_ctl when that changes, none per batch.
void kv_watch_out(int ep, KvClient &k, bool out)
{
	epoll_event ev = {};

	if (k.out_watched == out)
		return;
	ev.events = EPOLLIN | (out ? (unsigned)EPOLLOUT : 0u);
	ev.data.ptr = &k;
	epoll_ctl(ep, EPOLL_CTL_MOD, k.conn->fd(), &ev);
	k.out_watched = out;
}

void kv_build_batch(KvClient &k, bool put, size_t depth)
{
	static const std::string value = "xxx";

	t_seq_override = kSeqMark;
	for (size_t i = 0; i < depth; i++)
		put ? queue_put(*k.conn, k.key, value) : queue_get(*k.conn, k.key);
	t_seq_override = 0;
	k.batch = k.conn->take_out();
	for (size_t i = 0; i < depth; i++) {
		uint64_t mark = kSeqMark + i;
		auto at = std::search(k.batch.begin(), k.batch.end(), (const uint8_t *)&mark,
				      (const uint8_t *)&mark + sizeof(mark));
		if (at == k.batch.end())
			abort(); // the builder stores seqs inline, little-endian
		k.seq_at.push_back((size_t)(at - k.batch.begin()));
	}
}

void kv_send_batch(KvClient &k, bool put, size_t depth)
{
	size_t n = depth < k.left ? depth : k.left;

	if (k.batch.empty())
		kv_build_batch(k, put, depth);
	for (size_t i = 0; i < depth; i++) {
		uint64_t seq = g_seq++;
		memcpy(&k.batch[k.seq_at[i]], &seq, sizeof(seq));
	}
	if (n == depth) {
		k.conn->queue_raw(k.batch);
	} else { // a last, short batch: built afresh
		for (size_t i = 0; i < n; i++)
			put ? queue_put(*k.conn, k.key, "xxx") : queue_get(*k.conn, k.key);
	}
	k.left -= n;
	k.waiting = n;
}

// The KV clients of a benchmark: connected (token handshake) and, for gets, their key put
// once, before the timed runs. redis-benchmark also connects once per run of millions of
// requests; connecting 50 clients inside every 20000-request run was counted as KV time.
std::vector<KvClient> kv_connect(uint16_t port, bool put, size_t clients)
{
	std::vector<KvClient> ks(clients);
	ferry__frame f;

	for (size_t i = 0; i < clients; i++) {
		KvClient &k = ks[i];

		k.conn.reset(new Conn(port));
		k.key = "key:" + std::to_string(i);
		if (!put) { // something to get
			queue_put(*k.conn, k.key, "xxx");
			k.conn->flush();
			k.conn->next(&f);
		}
		k.conn->set_nonblocking();
	}
	return ks;
}

// A KV run: @ks's connections on one thread, @ops requests each, @depth in flight.
void kv_run(std::vector<KvClient> &ks, bool put, size_t ops, size_t depth)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	size_t active = ks.size();

	for (KvClient &k : ks) {
		epoll_event ev = {};

		k.left = ops;
		kv_send_batch(k, put, depth);
		k.out_watched = !k.conn->flush_some();
		ev.events = EPOLLIN | (k.out_watched ? (unsigned)EPOLLOUT : 0u);
		ev.data.ptr = &k;
		epoll_ctl(ep, EPOLL_CTL_ADD, k.conn->fd(), &ev);
	}
	while (active) {
		epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, -1);

		for (int i = 0; i < n; i++) {
			KvClient &k = *(KvClient *)evs[i].data.ptr;
			bool flushed = k.conn->flush_some();

			kv_watch_out(ep, k, !flushed);
			if (!flushed || !(evs[i].events & EPOLLIN))
				continue;
			size_t got = k.conn->read_frames();
			k.waiting -= got < k.waiting ? got : k.waiting;
			if (k.waiting)
				continue;
			if (!k.left) {
				epoll_ctl(ep, EPOLL_CTL_DEL, k.conn->fd(), nullptr);
				active--;
				continue;
			}
			kv_send_batch(k, put, depth);
			kv_watch_out(ep, k, !k.conn->flush_some());
		}
	}
	close(ep);
}

// One KV row against @srv. Args: put (0/1), clients, depth.
void kv_bench(benchmark::State &state, Server &srv)
{
	bool put = state.range(0);
	size_t clients = (size_t)state.range(1), depth = (size_t)state.range(2);
	size_t per_client = (20000 / clients + depth - 1) / depth * depth; // 20000 ops per run

	std::vector<KvClient> ks = kv_connect(srv.port, put, clients);
	uint64_t cpu0 = srv.cpu_ns();

	for (auto _ : state)
		kv_run(ks, put, per_client, depth);
	state.SetItemsProcessed((int64_t)(state.iterations() * per_client * clients));
	state.counters["srv_cpu_ns_per_op"] =
		(double)(srv.cpu_ns() - cpu0) / (double)(state.iterations() * per_client * clients);
}

void BM_gcs_kv(benchmark::State &state)
{
	kv_bench(state, server());
}
BENCHMARK(BM_gcs_kv)
	->ArgsProduct({{0, 1}, {1, 50}, {1, 16}})
	->UseRealTime()
	->Unit(benchmark::kMillisecond);

// The 1-client unpipelined rows with the server's loop always sleeping: what the busy-poll
// window (FERRY_GCS_SPIN_US) is worth, and the figure to set beside Redis's own sleeping loop.
void BM_gcs_kv_sleeping(benchmark::State &state)
{
	kv_bench(state, server_sleeping());
}
BENCHMARK(BM_gcs_kv_sleeping)
	->ArgsProduct({{0, 1}, {1}, {1}})
	->UseRealTime()
	->Unit(benchmark::kMillisecond);

// KV put with the WAL on. Args: clients, depth. A reply waits for the fdatasync of its group
// (one write + fdatasync per loop pass covers every request of that pass), so the rate is
// bounded by requests in flight / fdatasync latency: 8000 puts a run keep it short.
void BM_gcs_kv_wal(benchmark::State &state)
{
	uint16_t port = server_wal().port;
	size_t clients = (size_t)state.range(0), depth = (size_t)state.range(1);
	size_t per_client = (8000 / clients + depth - 1) / depth * depth;
	std::vector<KvClient> ks = kv_connect(port, true, clients);
	uint64_t cpu0 = server_wal().cpu_ns();

	for (auto _ : state)
		kv_run(ks, true, per_client, depth);
	state.SetItemsProcessed((int64_t)(state.iterations() * per_client * clients));
	state.counters["srv_cpu_ns_per_op"] = (double)(server_wal().cpu_ns() - cpu0) /
					      (double)(state.iterations() * per_client * clients);
}
BENCHMARK(BM_gcs_kv_wal)
	->Args({1, 16})
	->Args({50, 1})
	->Args({50, 16})
	->UseRealTime()
	->Unit(benchmark::kMillisecond);

void subscribe_channel(Conn &c, ferry_gcs_channel channel)
{
	ferry__wire_gcs_subscribe m = {};
	ferry__frame f;

	m.seq = next_seq();
	m.channel = channel;
	ferry__wire_gcs_subscribe_build(c.builder(), &m);
	c.queue(FERRY__WIRE_MSG_GCS_SUBSCRIBE);
	c.flush();
	c.next(&f); // the reply
}

// Items of one frame that are deltas (a GcsReply counts 0).
size_t deltas_in(const ferry__frame &f)
{
	if (f.type != FERRY__WIRE_MSG_GCS_PUBLISH)
		return 0;
	auto v = ferry__wire_gcs_publish_root_verified(f.payload);
	size_t n = 0;
	for (uint32_t i = 0; i < ferry__wire_gcs_publish_items_count(v); i++)
		n += ferry__wire_gcs_pub_item_kind(ferry__wire_gcs_publish_items_at(v, i)) == 0;
	return n;
}

// Args: subscribers, and 1 for error records (stored in the error table, then published) or
// 0 for log lines (published only, like Redis PUBLISH). Each iteration publishes kPublishes
// messages (16 in flight) and waits until every subscriber got all of them.
void BM_gcs_pubsub(benchmark::State &state)
{
	const size_t kPublishes = 2000, depth = 16;
	uint16_t port = server().port;
	size_t nsubs = (size_t)state.range(0);
	const bool errors = state.range(1) != 0;
	std::vector<std::unique_ptr<Conn>> subs;
	Conn pub(port);
	ferry__frame f;

	for (size_t i = 0; i < nsubs; i++) {
		subs.emplace_back(new Conn(port));
		subscribe_channel(*subs.back(), errors ? FERRY_GCS_CH_ERRORS : FERRY_GCS_CH_LOGS);
	}
	uint64_t cpu0 = server().cpu_ns();

	for (auto _ : state) {
		std::vector<std::thread> readers;
		for (auto &s : subs)
			readers.emplace_back([&s] {
				ferry__frame rf;
				for (size_t got = 0; got < kPublishes;) {
					s->next(&rf);
					got += deltas_in(rf);
				}
			});
		for (size_t done = 0; done < kPublishes; done += depth) {
			for (size_t i = 0; i < depth; i++) {
				if (errors)
					queue_publish(pub, done + i);
				else
					queue_log(pub, done + i);
			}
			pub.flush();
			for (size_t i = 0; i < depth; i++)
				pub.next(&f);
		}
		for (auto &r : readers)
			r.join();
	}
	state.SetItemsProcessed((int64_t)(state.iterations() * kPublishes * nsubs));
	state.counters["srv_cpu_ns_per_msg"] = (double)(server().cpu_ns() - cpu0) /
					       (double)(state.iterations() * kPublishes * nsubs);
}
BENCHMARK(BM_gcs_pubsub)
	->Args({1, 0})
	->Args({10, 0})
	->Args({100, 0})
	->Args({1, 1})
	->Args({100, 1})
	->UseRealTime()
	->Unit(benchmark::kMillisecond);

// Publish-to-receive latency with one subscriber: one publish at a time.
void BM_gcs_pubsub_latency(benchmark::State &state)
{
	uint16_t port = server().port;
	Conn pub(port), sub(port);
	ferry_bench::Latency lat;
	ferry__frame f;
	uint64_t n = 0;

	subscribe_channel(sub, FERRY_GCS_CH_LOGS);
	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns();
		queue_log(pub, n++);
		pub.flush();
		for (size_t got = 0; got < 1;) {
			sub.next(&f);
			got += deltas_in(f);
		}
		lat.add(ferry_bench::now_ns() - t0);
		pub.next(&f); // the publisher's reply
	}
	lat.publish(state);
}
BENCHMARK(BM_gcs_pubsub_latency)->Unit(benchmark::kMicrosecond);

} // namespace
