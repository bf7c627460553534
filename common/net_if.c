/* SPDX-License-Identifier: Apache-2.0 */
/*
 * This host's interface addresses and which of them carry RDMA (see net.h): what a node picks
 * its advertised address from. sysfs is a parameter so that tests can give a fake tree.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/net.h"

#define NET_LOG "net"

/* The first line of a small sysfs file, without its newline. */
static bool read_line(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	bool ok = f && fgets(buf, (int)size, f);

	if (f)
		fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

/* Whether any file in @dir (a GID table's ndevs/) names @name: RoCE on a VLAN or bond. */
static bool dir_names(const char *dir, const char *name)
{
	char path[PATH_MAX], text[64];
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;

	while (d && !found && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
			continue;
		found = read_line(path, text, sizeof(text)) && !strcmp(text, name);
	}
	if (d)
		closedir(d);
	return found;
}

/* Whether RDMA device @dev (under @sysfs/class/infiniband) sits on interface @name. */
static bool device_on(const char *sysfs, const char *dev, const char *name)
{
	char path[PATH_MAX], text[64];
	DIR *ports;
	struct dirent *e;
	bool found;

	snprintf(path, sizeof(path), "%s/class/infiniband/%s/parent", sysfs, dev);
	if (read_line(path, text, sizeof(text)) && !strcmp(text, name))
		return true; /* rdma_rxe, siw */
	snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports", sysfs, dev);
	ports = opendir(path);
	found = false;
	while (ports && !found && (e = readdir(ports))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%s/gid_attrs/ndevs",
			 sysfs, dev, e->d_name);
		found = dir_names(path, name);
	}
	if (ports)
		closedir(ports);
	return found;
}

bool ferry__net_if_rdma(const char *sysfs, const char *name)
{
	char path[PATH_MAX], text[64];
	struct stat st;
	DIR *d;
	struct dirent *e;
	bool found = false;

	if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return false;
	snprintf(path, sizeof(path), "%s/class/net/%s/type", sysfs, name);
	if (read_line(path, text, sizeof(text)) && atoi(text) == ARPHRD_INFINIBAND)
		return true; /* IPoIB */
	snprintf(path, sizeof(path), "%s/class/net/%s/device/infiniband", sysfs, name);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return true; /* the NIC's own RDMA function (RoCE, iWARP) */
	snprintf(path, sizeof(path), "%s/class/infiniband", sysfs);
	d = opendir(path);
	while (d && !found && (e = readdir(d)))
		found = e->d_name[0] != '.' && device_on(sysfs, e->d_name, name);
	if (d)
		closedir(d);
	return found;
}

bool ferry__net_rdma_devices(const char *sysfs)
{
	char path[PATH_MAX];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "%s/class/infiniband", sysfs);
	d = opendir(path);
	while (d && !found && (e = readdir(d)))
		found = e->d_name[0] != '.';
	if (d)
		closedir(d);
	return found;
}

int ferry__net_ip_text(const struct sockaddr *addr, char *buf, size_t size)
{
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)addr;
	const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)addr;

	if (addr->sa_family == AF_INET)
		return inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)size) ? 0 : -ENOSPC;
	if (addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) /* a dual-stack socket reaching IPv4 */
		return inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], buf, (socklen_t)size)
			       ? 0
			       : -ENOSPC;
	return inet_ntop(AF_INET6, &in6->sin6_addr, buf, (socklen_t)size) ? 0 : -ENOSPC;
}

bool ferry__net_ip_valid(const char *ip)
{
	struct in6_addr a6;
	struct in_addr a4;

	return ip && (inet_pton(AF_INET, ip, &a4) == 1 || inet_pton(AF_INET6, ip, &a6) == 1);
}

bool ferry__net_ip_loopback(const char *ip)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (!ip)
		return false;
	if (inet_pton(AF_INET, ip, &a4) == 1)
		return ntohl(a4.s_addr) >> 24 == 127;
	if (inet_pton(AF_INET6, ip, &a6) != 1)
		return false;
	return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
}

bool ferry__net_ip_wildcard(const char *ip)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (!ip)
		return false;
	if (inet_pton(AF_INET, ip, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY);
	return inet_pton(AF_INET6, ip, &a6) == 1 && IN6_IS_ADDR_UNSPECIFIED(&a6);
}

/* Fill @out from @i if it is an address of @family worth advertising. */
static bool iface_entry(const char *sysfs, const struct ifaddrs *i, int family,
			struct ferry__net_iface *out)
{
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)i->ifa_addr;

	if (!i->ifa_addr || i->ifa_addr->sa_family != family || !i->ifa_name)
		return false;
	if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
		return false;
	memset(out, 0, sizeof(*out));
	if (ferry__net_ip_text(i->ifa_addr, out->ip, sizeof(out->ip)) < 0)
		return false;
	snprintf(out->name, sizeof(out->name), "%s", i->ifa_name);
	out->family = family;
	out->up = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
	out->loopback = i->ifa_flags & IFF_LOOPBACK;
	out->rdma = !out->loopback && ferry__net_if_rdma(sysfs, out->name);
	return true;
}

int ferry__net_ifaces(const char *sysfs, struct ferry__net_iface *out, size_t max)
{
	static const int families[] = {AF_INET, AF_INET6};
	struct ifaddrs *ifs;
	size_t n = 0;

	if (getifaddrs(&ifs) < 0) {
		int ret = -errno;

		FLOG_ERROR(NET_LOG, "cannot list the network interfaces: %s", ferry_strerror(ret));
		return ret;
	}
	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++)
		for (struct ifaddrs *i = ifs; i && n < max; i = i->ifa_next)
			n += iface_entry(sysfs, i, families[f], &out[n]);
	freeifaddrs(ifs);
	return (int)n;
}

/*
 * The address a (non-empty) GID carries: RoCE v2 GIDs are IPv4-mapped or global IPv6
 * addresses; a link-local one (RoCE v1, InfiniBand's subnet prefix) carries none.
 */
static bool gid_ip(const struct in6_addr *gid, char *ip, size_t size)
{
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = *gid};

	if (IN6_IS_ADDR_LINKLOCAL(gid))
		return false;
	return ferry__net_ip_text((const struct sockaddr *)&sa, ip, size) == 0;
}

/* The IPoIB interface of device @dev (its PCI function's net/ entry), into @iface. */
static bool device_netdev(const char *sysfs, const char *dev, char *iface, size_t size)
{
	char path[PATH_MAX];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/net", sysfs, dev);
	d = opendir(path);
	while (d && !found && (e = readdir(d)))
		if (e->d_name[0] != '.' && strlen(e->d_name) < size) {
			snprintf(iface, size, "%s", e->d_name);
			found = true;
		}
	if (d)
		closedir(d);
	return found;
}

/*
 * GID @gid of @base (a port's directory): its address into @ip, else its interface.
 * -ENOENT past the table, -ENODATA for an empty entry (tables have holes).
 */
static int one_gid(const char *base, int gid, char *ip, size_t ip_size, char *iface,
		   size_t iface_size)
{
	char path[PATH_MAX], text[64];
	struct in6_addr a;

	snprintf(path, sizeof(path), "%s/gids/%d", base, gid);
	if (!read_line(path, text, sizeof(text)))
		return -ENOENT;
	/* sysfs writes "fe80:0000:...": eight groups of four, which inet_pton takes as is. */
	if (inet_pton(AF_INET6, text, &a) != 1 || IN6_IS_ADDR_UNSPECIFIED(&a))
		return -ENODATA;
	if (gid_ip(&a, ip, ip_size))
		return 0;
	snprintf(path, sizeof(path), "%s/gid_attrs/ndevs/%d", base, gid);
	if (read_line(path, text, sizeof(text)) && strlen(text) < iface_size) {
		if (!iface[0]) /* the first one found stays */
			snprintf(iface, iface_size, "%s", text);
		return 0;
	}
	return -EADDRNOTAVAIL;
}

int ferry__net_rdma_addr(const char *sysfs, const char *dev, unsigned port, int gid, char *ip,
			 size_t ip_size, char *iface, size_t iface_size)
{
	char base[PATH_MAX];
	struct stat st;
	int ret = -EADDRNOTAVAIL;

	ip[0] = iface[0] = '\0';
	if (!dev || !*dev || strchr(dev, '/') || !strcmp(dev, ".") || !strcmp(dev, "..")) {
		FLOG_ERROR(NET_LOG, "RDMA device name '%s' is not one", dev ? dev : "");
		return -EINVAL;
	}
	snprintf(base, sizeof(base), "%s/class/infiniband/%s/ports/%u", sysfs, dev,
		 port ? port : 1);
	if (stat(base, &st) < 0 || !S_ISDIR(st.st_mode)) {
		FLOG_ERROR(NET_LOG, "no RDMA device %s with a port %u (%s/class/infiniband)", dev,
			   port ? port : 1, sysfs);
		return -ENODEV;
	}
	if (gid >= 0) {
		ret = one_gid(base, gid, ip, ip_size, iface, iface_size);
		if (ret == -ENOENT || ret == -ENODATA) {
			FLOG_ERROR(NET_LOG, "RDMA device %s port %u has no GID %d (%s)", dev,
				   port ? port : 1, gid,
				   ret == -ENODATA ? "an empty entry" : "beyond its table");
			return -ENOENT;
		}
	} else {
		/* perftest's default is GID 0; ours is the first GID that names an address,
		 * as rdma_cm would reach the device through it. Entries past 255 are not read. */
		for (int g = 0; g < 256 && !ip[0]; g++)
			if (one_gid(base, g, ip, ip_size, iface, iface_size) == -ENOENT)
				break;
		ret = ip[0] || iface[0] ? 0 : -EADDRNOTAVAIL;
	}
	if (ret == -EADDRNOTAVAIL)
		ret = device_netdev(sysfs, dev, iface, iface_size) ? 0 : -EADDRNOTAVAIL;
	if (ret < 0)
		FLOG_ERROR(NET_LOG,
			   "RDMA device %s port %u: no GID with an address and no "
			   "interface to take one from",
			   dev, port ? port : 1);
	return ret;
}

const struct ferry__net_iface *ferry__net_iface_named(const struct ferry__net_iface *ifs, size_t n,
						      const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ifs[i].name, name))
			return &ifs[i];
	return NULL;
}
