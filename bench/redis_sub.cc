// SPDX-License-Identifier: Apache-2.0
// `ferry-bench redis-sub PORT CHANNEL COUNT`: a Redis subscriber that counts what it receives,
// so that bench/compare measures Redis pub/sub as messages delivered, like BM_gcs_pubsub does
// for the GCS (which stops its clock when every subscriber has every message). A publisher's
// own rate (what redis-benchmark reports) says nothing of delivery: Redis buffers up to its
// client-output-buffer limit for a subscriber that lags.
//
// It prints "ready" once subscribed, then "done NS" (CLOCK_MONOTONIC, nanoseconds: Python's
// time.monotonic_ns() reads the same clock) when COUNT messages have arrived, and exits 0; 1 on
// an error, 2 on bad arguments, 3 when nothing arrives for 30 s.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace
{

uint64_t monotonic_ns()
{
	timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool send_all(int fd, const std::string &s)
{
	for (size_t off = 0; off < s.size();) {
		ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		off += (size_t)n;
	}
	return true;
}

// Counts occurrences of @pat in a byte stream fed in pieces (a match may straddle two).
struct Counter {
	explicit Counter(const char *p) : pat(p)
	{
	}

	std::string pat;  // what is counted
	std::string tail; // the last pat.size() - 1 bytes seen
	uint64_t count = 0;

	void feed(const char *p, size_t n)
	{
		std::string joined = tail;
		joined.append(p, n);
		for (size_t at = joined.find(pat); at != std::string::npos;
		     at = joined.find(pat, at + pat.size()))
			count++;
		size_t keep = pat.size() - 1;
		tail = joined.size() > keep ? joined.substr(joined.size() - keep) : joined;
	}
};

} // namespace

int ferry_bench_redis_sub_main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: ferry-bench redis-sub PORT CHANNEL COUNT\n");
		return 2;
	}
	int port = atoi(argv[1]);
	std::string channel = argv[2];
	uint64_t want = strtoull(argv[3], nullptr, 10);
	if (port <= 0 || port > 65535 || channel.empty() || want == 0) {
		fprintf(stderr, "redis-sub: bad port, channel or count\n");
		return 2;
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("redis-sub: connect");
		return 1;
	}
	std::string cmd = "*2\r\n$9\r\nSUBSCRIBE\r\n$" + std::to_string(channel.size()) + "\r\n" +
			  channel + "\r\n";
	if (!send_all(fd, cmd)) {
		perror("redis-sub: send");
		return 1;
	}
	// Every push is an array "*3 $7 message $N CHANNEL $M PAYLOAD"; the confirmation is
	// "*3 $9 subscribe $N CHANNEL :1". Counting the "message" bulk string counts messages.
	Counter msgs("$7\r\nmessage\r\n"), confirm("$9\r\nsubscribe\r\n");
	std::vector<char> buf(1 << 20);
	bool ready = false;
	while (msgs.count < want) {
		pollfd p{fd, POLLIN, 0};
		int r = poll(&p, 1, 30000);
		if (r == 0) {
			fprintf(stderr, "redis-sub: %llu of %llu messages, then nothing for 30 s\n",
				(unsigned long long)msgs.count, (unsigned long long)want);
			return 3;
		}
		ssize_t n = r < 0 ? -1 : recv(fd, buf.data(), buf.size(), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "redis-sub: connection ended after %llu messages\n",
				(unsigned long long)msgs.count);
			return 1;
		}
		if (!ready) {
			confirm.feed(buf.data(), (size_t)n);
			if (confirm.count) {
				ready = true;
				printf("ready\n");
				fflush(stdout);
			}
		}
		msgs.feed(buf.data(), (size_t)n);
	}
	printf("done %llu\n", (unsigned long long)monotonic_ns());
	fflush(stdout);
	close(fd);
	return 0;
}
