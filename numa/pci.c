/*
 * numa/pci.c — the NUMA node of a GPU, from its PCI bus id.
 *
 * CUDA reports bus ids as "0000:3B:00.0" (cudaDeviceGetPCIBusId) or with an
 * 8-digit domain "00000000:3B:00.0" (nvidia-smi, NVML); sysfs names devices in
 * lower case with the domain printed as %04x.  The id is parsed into its four
 * numbers and printed back in the sysfs form, so no string from the caller ever
 * reaches a path.  The node is /sys/bus/pci/devices/<id>/numa_node, where -1
 * means the firmware did not say.  Plain libc in both builds: reading sysfs
 * needs no libnuma.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "numa/internal.h"

/* Parse up to max_digits hex digits at *s; advances *s.  -1 if none. */
static long hex_field(const char **s, int max_digits)
{
	long v = 0;
	int n = 0;

	while (isxdigit((unsigned char)**s) && n < max_digits) {
		int c = tolower((unsigned char)**s);
		v = v * 16 + (isdigit(c) ? c - '0' : c - 'a' + 10);
		(*s)++;
		n++;
	}
	return n ? v : -1;
}

int kvs_numa_pci_normalize(const char *pci_bus_id, char *out, size_t out_len)
{
	const char *s = pci_bus_id;
	long f[3], domain = 0, bus, dev, fn;
	int nf = 0, len;

	if (!s || !out)
		return -EINVAL;
	/* [domain:]bus:device.function; domain up to 8 digits, bus 2, device 2, fn 1. */
	for (;;) {
		if (nf == 3)
			return -EINVAL;
		f[nf++] = hex_field(&s, 8);
		if (f[nf - 1] < 0)
			return -EINVAL;
		if (*s != ':')
			break;
		s++;
	}
	if (*s != '.' || nf < 2)
		return -EINVAL;
	s++;
	fn = hex_field(&s, 1);
	if (fn < 0 || fn > 7 || *s != '\0')
		return -EINVAL;
	if (nf == 3)
		domain = f[0];
	bus = f[nf - 2];
	dev = f[nf - 1];
	if (domain > 0xffffffffl || bus > 0xff || dev > 0x1f)
		return -EINVAL;
	len = snprintf(out, out_len, "%04lx:%02lx:%02lx.%lx", domain, bus, dev, fn);
	if (len < 0 || (size_t)len >= out_len)
		return -ENAMETOOLONG;
	return 0;
}

int kvs_numa_node_of_pci(const char *pci_bus_id)
{
	char id[32], path[96], text[16];
	ssize_t n;
	long node;
	char *end;
	int fd, rc;

	rc = kvs_numa_pci_normalize(pci_bus_id, id, sizeof(id));
	if (rc < 0)
		return rc;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", id);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, text, sizeof(text) - 1);
	rc = n < 0 ? -errno : 0;
	close(fd);
	if (rc < 0)
		return rc;
	if (n <= 0)
		return -EIO;
	text[n] = '\0';
	node = strtol(text, &end, 10);
	if (end == text || node < -1 || node >= KVS_NUMA_MAX_NODES)
		return -EIO;
	if (node < 0 || kvs_numa_node_count() == 1)
		return KVS_NUMA_NODE_NONE;
	return (int)node;
}
