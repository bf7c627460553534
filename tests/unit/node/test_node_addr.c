/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The advertised address of a node: the interface helpers (common/net_if.c, with a fake sysfs
 * tree for the RDMA checks) and the node's policy (node/node_addr.c: --ip, the GCS route, an
 * RDMA interface; which addresses clash in one cluster).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/net.h"
#include "node/node.h"
#include "tests/harness/ftest.h"

/* A file under the test's directory, its parents made. */
static void put_file(const char *rel, const char *text)
{
	char path[512], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", ftest_tmpdir(), rel);
	for (slash = strchr(path + strlen(ftest_tmpdir()) + 1, '/'); slash;
	     slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0700);
		*slash = '/';
	}
	f = fopen(path, "w");
	ftest_assert_ptr_notnull(f);
	fputs(text, f);
	fclose(f);
}

FTEST(rdma_interfaces_from_sysfs)
{
	const char *sys = ftest_tmpdir();

	put_file("class/net/eth0/type", "1\n");
	put_file("class/net/ib0/type", "32\n"); /* IPoIB */
	put_file("class/net/enp1/type", "1\n"); /* a RoCE NIC: its device has an RDMA function */
	put_file("class/net/enp1/device/infiniband/mlx5_0/x", "");
	put_file("class/net/veth0/type", "1\n"); /* soft-RoCE on it */
	put_file("class/infiniband/rxe0/parent", "veth0\n");
	put_file("class/net/vlan7/type", "1\n"); /* RoCE through a VLAN: only the GID table */
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "enp1\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3", "vlan7\n");

	ftest_assert_false(ferry__net_if_rdma(sys, "eth0"));
	ftest_assert_true(ferry__net_if_rdma(sys, "ib0"));
	ftest_assert_true(ferry__net_if_rdma(sys, "enp1"));
	ftest_assert_true(ferry__net_if_rdma(sys, "veth0"));
	ftest_assert_true(ferry__net_if_rdma(sys, "vlan7"));
	ftest_assert_false(ferry__net_if_rdma(sys, "nosuch"));
	ftest_assert_false(ferry__net_if_rdma(sys, "../net/ib0"));
	ftest_assert_false(ferry__net_if_rdma(sys, ""));
	ftest_assert_false(ferry__net_if_rdma("/nonexistent", "ib0"));
	ftest_assert_true(ferry__net_rdma_devices(sys));
	ftest_assert_false(ferry__net_rdma_devices("/nonexistent"));
}

/* perftest's -d/-i/-x as an address: a RoCE v2 GID is one, RoCE v1 and IB name an interface. */
FTEST(rdma_gid_addresses)
{
	const char *sys = ftest_tmpdir();
	char ip[FERRY__NET_IP_MAX], ifc[16];

	put_file("class/infiniband/mlx5_0/ports/1/gids/0",
		 "fe80:0000:0000:0000:0202:c9ff:fe00:0001\n"); /* RoCE v1 */
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "enp1\n");
	put_file("class/infiniband/mlx5_0/ports/1/gids/1",
		 "0000:0000:0000:0000:0000:0000:0000:0000\n"); /* empty */
	put_file("class/infiniband/mlx5_0/ports/1/gids/2",
		 "0000:0000:0000:0000:0000:ffff:0a00:0002\n"); /* RoCE v2, 10.0.0.2 */
	put_file("class/infiniband/mlx5_0/ports/1/gids/3",
		 "fd00:0000:0000:0000:0000:0000:0000:0007\n"); /* RoCE v2, IPv6 */
	put_file("class/infiniband/mlx5_1/ports/1/gids/0",
		 "fe80:0000:0000:0000:0002:c903:0010:0001\n"); /* InfiniBand */
	put_file("class/infiniband/mlx5_1/device/net/ib0/type", "32\n");

	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 1, 2, ip, sizeof(ip), ifc, sizeof(ifc)), 0);
	ftest_assert_str_eq(ip, "10.0.0.2");
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 0, 3, ip, sizeof(ip), ifc, sizeof(ifc)), 0);
	ftest_assert_str_eq(ip, "fd00::7");
	/* No -x: the first GID that carries an address. */
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 1, -1, ip, sizeof(ip), ifc, sizeof(ifc)), 0);
	ftest_assert_str_eq(ip, "10.0.0.2");
	/* GID 0 is RoCE v1: its interface, whose address the caller takes. */
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 1, 0, ip, sizeof(ip), ifc, sizeof(ifc)), 0);
	ftest_assert_str_eq(ip, "");
	ftest_assert_str_eq(ifc, "enp1");
	/* InfiniBand: the device's IPoIB interface. */
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_1", 1, -1, ip, sizeof(ip), ifc, sizeof(ifc)), 0);
	ftest_assert_str_eq(ifc, "ib0");
	/* What is not there (an empty entry too), and names that are not names. */
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 1, 1, ip, sizeof(ip), ifc, sizeof(ifc)),
		-ENOENT);
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 1, 9, ip, sizeof(ip), ifc, sizeof(ifc)),
		-ENOENT);
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "mlx5_0", 2, -1, ip, sizeof(ip), ifc, sizeof(ifc)),
		-ENODEV);
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "nosuch", 1, -1, ip, sizeof(ip), ifc, sizeof(ifc)),
		-ENODEV);
	ftest_assert_int_eq(
		ferry__net_rdma_addr(sys, "../x", 1, -1, ip, sizeof(ip), ifc, sizeof(ifc)),
		-EINVAL);
}

FTEST(ip_predicates)
{
	ftest_assert_true(ferry__net_ip_valid("10.1.2.3"));
	ftest_assert_true(ferry__net_ip_valid("fd00::1"));
	ftest_assert_false(ferry__net_ip_valid("eth0"));
	ftest_assert_false(ferry__net_ip_valid(NULL));
	ftest_assert_true(ferry__net_ip_loopback("127.0.0.1"));
	ftest_assert_true(ferry__net_ip_loopback("127.3.4.5"));
	ftest_assert_true(ferry__net_ip_loopback("::1"));
	ftest_assert_true(ferry__net_ip_loopback("::ffff:127.0.0.1"));
	ftest_assert_false(ferry__net_ip_loopback("10.0.0.1"));
	ftest_assert_false(ferry__net_ip_loopback("lo"));
	ftest_assert_true(ferry__net_ip_wildcard("0.0.0.0"));
	ftest_assert_true(ferry__net_ip_wildcard("::"));
	ftest_assert_false(ferry__net_ip_wildcard("10.0.0.1"));
	ftest_assert_false(ferry__net_ip_wildcard(NULL));
}

FTEST(ip_text_unmaps_ipv4)
{
	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
	struct sockaddr_in in = {.sin_family = AF_INET};
	struct sockaddr sa = {.sa_family = AF_UNIX};
	char buf[FERRY__NET_IP_MAX];

	inet_pton(AF_INET, "10.9.8.7", &in.sin_addr);
	ftest_assert_ok(ferry__net_ip_text((struct sockaddr *)&in, buf, sizeof(buf)));
	ftest_assert_str_eq(buf, "10.9.8.7");
	inet_pton(AF_INET6, "::ffff:10.9.8.7", &in6.sin6_addr);
	ftest_assert_ok(ferry__net_ip_text((struct sockaddr *)&in6, buf, sizeof(buf)));
	ftest_assert_str_eq(buf, "10.9.8.7");
	inet_pton(AF_INET6, "fd00::5", &in6.sin6_addr);
	ftest_assert_ok(ferry__net_ip_text((struct sockaddr *)&in6, buf, sizeof(buf)));
	ftest_assert_str_eq(buf, "fd00::5");
	ftest_assert_errno(ferry__net_ip_text(&sa, buf, sizeof(buf)), -EAFNOSUPPORT);
	ftest_assert_errno(ferry__net_ip_text((struct sockaddr *)&in, buf, 4), -ENOSPC);
}

FTEST(this_hosts_interfaces)
{
	struct ferry__net_iface ifs[64];
	int n = ferry__net_ifaces("/sys", ifs, 64);
	bool lo = false;

	ftest_assert_int_ge(n, 0);
	for (int i = 0; i < n; i++) {
		ftest_assert_true(ferry__net_ip_valid(ifs[i].ip));
		if (i > 0) /* IPv4 first */
			ftest_assert_true(ifs[i - 1].family == AF_INET ||
					  ifs[i].family == AF_INET6);
		if (!strcmp(ifs[i].ip, "127.0.0.1")) {
			lo = true;
			ftest_assert_true(ifs[i].loopback);
			ftest_assert_false(ifs[i].rdma);
		}
	}
	if (!lo)
		ftest_skip("no 127.0.0.1 on this host's interfaces");
	ftest_assert_int_le(ferry__net_ifaces("/sys", ifs, 1), 1);
}

/* A host with loopback, Ethernet (the route to the GCS), a down IB port and an up one. */
static const struct ferry__net_iface host[] = {
	{.name = "lo", .ip = "127.0.0.1", .family = AF_INET, .up = true, .loopback = true},
	{.name = "eth0", .ip = "192.168.1.5", .family = AF_INET, .up = true},
	{.name = "ib1", .ip = "10.8.0.5", .family = AF_INET, .up = false, .rdma = true},
	{.name = "ib0", .ip = "10.9.0.5", .family = AF_INET, .up = true, .rdma = true},
	{.name = "eth0", .ip = "fd00::5", .family = AF_INET6, .up = true},
};
#define NHOST (sizeof(host) / sizeof(host[0]))

FTEST(pick_given_address_or_interface)
{
	struct ferry__node_ip_pick p;

	ftest_assert_ok(ferry__node_pick_ip("10.1.1.1", "192.168.1.5", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "10.1.1.1");
	ftest_assert_ok(ferry__node_pick_ip("fd00::77", NULL, false, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "fd00::77");
	/* An interface name: its IPv4 address first. */
	ftest_assert_ok(ferry__node_pick_ip("eth0", "10.9.0.5", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "192.168.1.5");
	ftest_assert_ok(ferry__node_pick_ip("lo", "192.168.1.5", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "127.0.0.1");
	ftest_assert_errno(ferry__node_pick_ip("wlan9", "192.168.1.5", true, host, NHOST, &p),
			   -ENODEV);
	/* The helper the CLI's --ip for the GCS and ferry-sched shares. */
	ftest_assert_str_eq(ferry__net_iface_named(host, NHOST, "eth0")->ip, "192.168.1.5");
	ftest_assert_ptr_null(ferry__net_iface_named(host, NHOST, "wlan9"));
	ftest_assert_ptr_null(ferry__net_iface_named(host, 0, "lo"));
}

FTEST(pick_route_to_the_gcs)
{
	struct ferry__node_ip_pick p;

	/* No --ip (or a wildcard one): the route's address; without RDMA wanted, even here. */
	ftest_assert_ok(ferry__node_pick_ip(NULL, "192.168.1.5", false, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "192.168.1.5");
	ftest_assert_ok(ferry__node_pick_ip("0.0.0.0", "192.168.1.5", false, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "192.168.1.5");
	ftest_assert_ok(ferry__node_pick_ip("", "fd00::5", false, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "fd00::5");
	/* A GCS on loopback: a one-host cluster, loopback it is (RDMA or not). */
	ftest_assert_ok(ferry__node_pick_ip(NULL, "127.0.0.1", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "127.0.0.1");
	/* Unknown route: loopback, said so. */
	ftest_assert_ok(ferry__node_pick_ip(NULL, NULL, true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "127.0.0.1");
	ftest_assert_true(strstr(p.why, "no address") != NULL);
}

FTEST(pick_rdma_interface_over_route)
{
	struct ferry__node_ip_pick p;
	struct ferry__net_iface no_ib[2] = {host[0], host[1]};

	/* RDMA wanted, the route (eth0) has none: the up IB port, not the down one. */
	ftest_assert_ok(ferry__node_pick_ip(NULL, "192.168.1.5", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "10.9.0.5");
	ftest_assert_true(strstr(p.why, "ib0") && strstr(p.why, "eth0"));
	/* The route is the IB port itself. */
	ftest_assert_ok(ferry__node_pick_ip(NULL, "10.8.0.5", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "10.8.0.5");
	/* No RDMA interface: the route. */
	ftest_assert_ok(ferry__node_pick_ip(NULL, "192.168.1.5", true, no_ib, 2, &p));
	ftest_assert_str_eq(p.ip, "192.168.1.5");
	/* --ip wins over RDMA. */
	ftest_assert_ok(ferry__node_pick_ip("eth0", "192.168.1.5", true, host, NHOST, &p));
	ftest_assert_str_eq(p.ip, "192.168.1.5");
}

static struct ferry__node_addr addr(const char *ip, const char *boot)
{
	struct ferry__node_addr a;

	memset(&a, 0, sizeof(a));
	snprintf(a.ip, sizeof(a.ip), "%s", ip);
	snprintf(a.host, sizeof(a.host), "%s", boot);
	a.tcp_port = 4000;
	return a;
}

FTEST(loopback_clashes_across_hosts_only)
{
	struct ferry__node_addr lo_a = addr("127.0.0.1", "boot-a"), lo_b = addr("::1", "boot-b");
	struct ferry__node_addr net_a = addr("10.0.0.1", "boot-a"),
				net_b = addr("10.0.0.2", "boot-b");

	ftest_assert_int_eq(ferry__node_addr_clash(&lo_a, &net_b), 1);
	ftest_assert_int_eq(ferry__node_addr_clash(&net_b, &lo_a), 2);
	ftest_assert_int_eq(ferry__node_addr_clash(&lo_a, &net_a), 0); /* one host */
	ftest_assert_int_eq(ferry__node_addr_clash(&net_a, &net_b), 0);
	ftest_assert_int_eq(ferry__node_addr_clash(&lo_a, &lo_b), 0); /* nothing to compare */
}

/* The runtime endpoint's key: a node's address carries it beside its transports, and alone with
 * an ip and a host it names a worker's or an owner's TCP socket. */
FTEST(runtime_endpoint_key)
{
	static const char *const bad[] = {
		"ip=10.0.0.1;host=ab",		 /* neither transport nor rt */
		"ip=10.0.0.1;rt=0;host=ab",	 /* port 0 */
		"ip=10.0.0.1;rt=70000;host=ab",	 /* port range */
		"ip=10.0.0.1;rt=7;rt=8;host=ab", /* repeated */
		"ip=10.0.0.1;rt=;host=ab",	 /* empty */
		"rt=7;host=ab",			 /* no ip */
		"ip=10.0.0.1;rt=7",		 /* no host */
	};
	struct ferry__node_addr a, b;
	char text[FERRY__NODE_ADDR_MAX];
	int n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ftest_assert_errno(ferry__node_addr_parse(bad[i], strlen(bad[i]), &a), -EINVAL);
	ftest_assert_ok(ferry__node_addr_parse("ip=10.0.0.1;rt=4100;host=ab", 27, &a));
	ftest_assert_uint_eq(a.rt_port, 4100);
	ftest_assert_uint_eq(ferry__node_addr_transports(&a), 0);
	ftest_assert_ok(ferry__node_addr_parse("ip=::1;tcp=7;rt=9;shm=/s;host=ab", 32, &a));
	ftest_assert_uint_eq(a.rt_port, 9);
	n = ferry__node_addr_format(&a, text, sizeof(text));
	ftest_assert_int_gt(n, 0);
	ftest_assert_ok(ferry__node_addr_parse(text, (size_t)n, &b));
	ftest_assert_mem_eq(&a, &b, sizeof(a));
	/* An older node's address has none: 0, and nothing is added. */
	ftest_assert_ok(ferry__node_addr_parse("ip=::1;tcp=7;host=ab", 20, &a));
	ftest_assert_uint_eq(a.rt_port, 0);
	n = ferry__node_addr_format(&a, text, sizeof(text));
	ftest_assert_ptr_null(strstr(text, "rt="));
}
