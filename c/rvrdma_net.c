// SPDX-License-Identifier: GPL-2.0
/*
 * rvrdma: one-line wrappers for the static inline skb, socket, route and netns functions that
 * rust/net/ calls. Driver logic stays in Rust.
 */
#include "rvrdma_net.h"
#include <linux/crc32.h>
#include <linux/highmem.h>
#include <net/sch_generic.h>

void rvr_skb_reset_network_header(struct sk_buff *skb)
{
	skb_reset_network_header(skb);
}

int rvr_skb_linearize(struct sk_buff *skb)
{
	return skb_linearize(skb);
}

unsigned char *rvr_skb_linear_unshared(const struct sk_buff *skb, unsigned int *len)
{
	if (skb_cloned(skb))
		return NULL;
	*len = skb_headlen(skb);
	return skb->data;
}

void rvr_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}

struct sk_buff *rvr_alloc_skb(unsigned int size)
{
	return alloc_skb(size, GFP_ATOMIC);
}

/* An skb to transmit, empty, with room for @ndev's link-layer header and @head bytes of
 * network and UDP headers in front of the @len bytes to be put. */
struct sk_buff *rvr_alloc_tx_skb(const struct net_device *ndev, unsigned int head,
				 unsigned int len)
{
	unsigned int room = LL_RESERVED_SPACE(ndev) + head;
	struct sk_buff *skb = alloc_skb(room + len, GFP_ATOMIC);

	if (skb)
		skb_reserve(skb, room);
	return skb;
}

/* The per-packet set-up of a transmitted skb once its UDP payload is in, in one call: pushes the
 * UDP header (the transport header) and an @ip_hlen-byte IP header (the network header), sets
 * the device, protocol and route (taking a reference on @dst, which may be NULL) and clears the
 * IP control block. Returns skb->data (the IP header), or NULL with the skb unchanged if its
 * headroom is short or a clone shares its data. The headers' bytes are left to the caller. */
unsigned char *rvr_skb_tx_headers(struct sk_buff *skb, struct net_device *ndev, __be16 proto,
				  struct dst_entry *dst, unsigned int ip_hlen)
{
	if (skb_cloned(skb) || skb_headroom(skb) < ip_hlen + sizeof(struct udphdr))
		return NULL;
	__skb_push(skb, sizeof(struct udphdr));
	skb_reset_transport_header(skb);
	__skb_push(skb, ip_hlen);
	skb_reset_network_header(skb);
	skb->dev = ndev;
	skb->protocol = proto;
	skb_scrub_packet(skb, false);
	skb_clear_hash(skb);
	skb_dst_set(skb, dst_clone(dst));
	memset(IPCB(skb), 0, sizeof(*IPCB(skb)));
	return skb->data;
}

/* A received skb kept past the receive path's RCU section: its route may be held without a
 * reference (SKB_DST_NOREF), and its conntrack entry is of no use any more. */
void rvr_skb_detach(struct sk_buff *skb)
{
	skb_dst_drop(skb);
	nf_reset_ct(skb);
}

void rvr_skb_queue_head_init(struct sk_buff_head *q)
{
	skb_queue_head_init(q);
}

void rvr_skb_queue_purge(struct sk_buff_head *q)
{
	skb_queue_purge(q);
}

struct net *rvr_dev_net(const struct net_device *ndev)
{
	return dev_net(ndev);
}

struct net_device *rvr_init_net_dev_get_by_name(const char *name)
{
	return dev_get_by_name(&init_net, name);
}

int rvr_netdev_ifindex(const struct net_device *ndev)
{
	return ndev->ifindex;
}

/* Adds (or drops) the Ethernet multicast address of a multicast GID to the device's filter. */
int rvr_dev_mc_gid(struct net_device *ndev, const u8 *gid, bool add)
{
	u8 mac[ETH_ALEN];

	if (ipv6_addr_v4mapped((const struct in6_addr *)gid))
		ip_eth_mc_map(*(const __be32 *)(gid + 12), mac);
	else
		ipv6_eth_mc_map((const struct in6_addr *)gid, mac);
	return add ? dev_mc_add(ndev, mac) : dev_mc_del(ndev, mac);
}

int rvr_udp_sock_create(struct net *net, struct udp_port_cfg *cfg, struct socket **sockp)
{
	return udp_sock_create(net, cfg, sockp);
}

struct sock *rvr_socket_sk(const struct socket *sock)
{
	return sock->sk;
}

void *rvr_rcu_dereference_sk_user_data(const struct sock *sk)
{
	return rcu_dereference_sk_user_data(sk);
}

void rvr_sock_hold(struct sock *sk)
{
	sock_hold(sk);
}

void rvr_sock_put(struct sock *sk)
{
	sock_put(sk);
}

bool rvr_irqs_disabled(void)
{
	return irqs_disabled();
}

struct rtable *rvr_ip_route_output_key(struct net *net, struct flowi4 *fl4)
{
	return ip_route_output_key(net, fl4);
}

struct dst_entry *rvr_rtable_dst(struct rtable *rt)
{
	return &rt->dst;
}

int rvr_dst_error(const struct dst_entry *dst)
{
	return dst->error;
}

struct dst_entry *rvr_dst_clone(struct dst_entry *dst)
{
	return dst_clone(dst);
}

struct dst_entry *rvr_dst_check(struct dst_entry *dst, u32 cookie)
{
	return dst_check(dst, cookie);
}

bool rvr_dst_leaves_by(const struct dst_entry *dst, const struct net_device *dev)
{
	return dst_dev(dst) == dev;
}

bool rvr_dst_dead(const struct dst_entry *dst)
{
	return READ_ONCE(dst->obsolete) == DST_OBSOLETE_DEAD || dst_dev(dst) == blackhole_netdev;
}

u32 rvr_rt6_get_cookie(struct dst_entry *dst)
{
	return rt6_get_cookie(dst_rt6_info(dst));
}

unsigned int rvr_backlog_tail(unsigned int cpu)
{
#ifdef CONFIG_RPS
	return READ_ONCE(per_cpu(softnet_data, cpu).input_queue_tail);
#else
	return 0;
#endif
}

unsigned int rvr_backlog_head(unsigned int cpu)
{
#ifdef CONFIG_RPS
	return READ_ONCE(per_cpu(softnet_data, cpu).input_queue_head);
#else
	return 0;
#endif
}

struct dst_entry *rvr_skb_dst(const struct sk_buff *skb)
{
	return skb_dst(skb);
}

/* Whether the device @skb's route leaves by has no queueing discipline on any transmit queue
 * (a veth's default, noqueue): a qdisc that queues (netem, tbf, pfifo_fast) drops, duplicates
 * and delays a GSO burst as one packet. */
bool rvr_skb_out_unqueued(const struct sk_buff *skb)
{
	struct dst_entry *dst = skb_dst(skb);
	struct net_device *dev = dst ? dst->dev : NULL;
	bool unqueued = dev;
	unsigned int i;

	rcu_read_lock();
	for (i = 0; unqueued && i < dev->num_tx_queues; i++)
		unqueued = !rcu_dereference(netdev_get_tx_queue(dev, i)->qdisc)->enqueue;
	rcu_read_unlock();
	return unqueued;
}

/* @skb joins the fragment list of @head, which has the same owner socket: @skb's memory stays
 * charged to the socket and is released with @head, whose truesize takes it over
 * (rvr_skb_frag_list_append). So its owner goes without uncharging and recharging; its route
 * reference goes too. An owner that is not sock_wfree's is moved the long way. */
void rvr_skb_pass_owner(struct sk_buff *head, struct sk_buff *skb)
{
	skb_dst_drop(skb);
	if (likely(skb->destructor == sock_wfree && head->destructor == sock_wfree &&
		   skb->sk == head->sk)) {
		skb->sk = NULL;
		skb->destructor = NULL;
		return;
	}
	refcount_add(skb->truesize, &head->sk->sk_wmem_alloc);
	skb_orphan(skb);
}

/* Appends @len bytes of @page from @off as the skb's next fragment, taking a page reference
 * that the skb drops when it is freed. The bytes stay the page owner's, who may write them
 * while the skb lives: SKBFL_SHARED_FRAG makes anyone who would change them in place copy
 * first. -EMSGSIZE when every fragment slot is taken. */
int rvr_skb_add_page_frag(struct sk_buff *skb, struct page *page, unsigned int off,
			  unsigned int len)
{
	struct skb_shared_info *sh = skb_shinfo(skb);

	if (sh->nr_frags >= MAX_SKB_FRAGS)
		return -EMSGSIZE;
	get_page(page);
	skb_fill_page_desc_noacc(skb, sh->nr_frags, page, off, len);
	sh->flags |= SKBFL_SHARED_FRAG;
	skb->len += len;
	skb->data_len += len;
	skb->truesize += len;
	return 0;
}

/* Appends @len fresh bytes (at most a cache line) as the skb's last fragment, from the
 * per-CPU page fragment cache (any context), and returns them for the caller to write; NULL
 * when no slot or memory is left. */
void *rvr_skb_add_trailer_frag(struct sk_buff *skb, unsigned int len)
{
	struct skb_shared_info *sh = skb_shinfo(skb);
	void *p;

	if (sh->nr_frags >= MAX_SKB_FRAGS || len > SMP_CACHE_BYTES)
		return NULL;
	/* A cache-aligned piece never crosses a page: one page descriptor holds it. */
	p = netdev_alloc_frag_align(SMP_CACHE_BYTES, SMP_CACHE_BYTES);
	if (!p)
		return NULL;
	skb_fill_page_desc_noacc(skb, sh->nr_frags, virt_to_page(p), offset_in_page(p), len);
	skb->len += len;
	skb->data_len += len;
	skb->truesize += SMP_CACHE_BYTES;
	return p;
}

/*
 * A CRC-32 continued from @crc over the first @len bytes of the skb's fragments: with @crc_fn,
 * or crc32_le when it is NULL.
 */
u32 rvr_skb_frags_crc32_le(const struct sk_buff *skb, u32 crc, u32 len, rvr_crc32_fn crc_fn)
{
	const struct skb_shared_info *sh = skb_shinfo(skb);
	unsigned int i;

	/* Device memory (net_iov) has no page to map: callers check, this only refuses. */
	if (WARN_ON_ONCE(!skb_frags_readable(skb)))
		return crc;
	for (i = 0; len && i < sh->nr_frags; i++) {
		const skb_frag_t *f = &sh->frags[i];
		u32 n = min_t(u32, skb_frag_size(f), len);
		struct page *p;
		u32 p_off, p_len, copied;

		skb_frag_foreach_page(f, skb_frag_off(f), n, p, p_off, p_len, copied) {
			u8 *va = kmap_local_page(p);

			crc = crc_fn ? crc_fn(crc, va + p_off, p_len) :
				       crc32_le(crc, va + p_off, p_len);
			kunmap_local(va);
		}
		len -= n;
	}
	return crc;
}

int rvr_skb_copy_bits(const struct sk_buff *skb, u32 offset, void *to, u32 len)
{
	if (offset > INT_MAX || len > INT_MAX)
		return -EFAULT;
	return skb_copy_bits(skb, offset, to, len);
}

bool rvr_skb_has_frag_list(const struct sk_buff *skb)
{
	return skb_has_frag_list(skb);
}

bool rvr_skb_frags_readable(const struct sk_buff *skb)
{
	return skb_frags_readable(skb);
}

/* The bookkeeping of skb_gro_receive_list: @nskb's bytes and memory count in @head's. */
void rvr_skb_frag_list_append(struct sk_buff *head, struct sk_buff *tail, struct sk_buff *nskb)
{
	if (tail)
		tail->next = nskb;
	else
		skb_shinfo(head)->frag_list = nskb;
	nskb->next = NULL;
	head->len += nskb->len;
	head->data_len += nskb->len;
	head->truesize += nskb->truesize;
}

/* As udp4_gro_complete marks a list of UDP packets: no checksum is left to compute. */
void rvr_skb_set_udp_gso_list(struct sk_buff *skb, unsigned int gso_size, unsigned int segs)
{
	skb_shinfo(skb)->gso_size = gso_size;
	skb_shinfo(skb)->gso_segs = segs;
	skb_shinfo(skb)->gso_type = SKB_GSO_UDP_L4 | SKB_GSO_FRAGLIST;
	skb->ip_summed = CHECKSUM_UNNECESSARY;
}

void rvr_local_bh_disable(void)
{
	local_bh_disable();
}

void rvr_local_bh_enable(void)
{
	local_bh_enable();
}

unsigned int rvr_this_cpu(void)
{
	return smp_processor_id();
}

bool rvr_need_resched(void)
{
	return need_resched();
}

unsigned int rvr_raw_this_cpu(void)
{
	return raw_smp_processor_id();
}

int rvr_next_online_cpu(void)
{
	unsigned int cpu = smp_processor_id();
	unsigned int next = cpumask_next_wrap(cpu, cpu_online_mask);

	return next < nr_cpu_ids && next != cpu ? next : -1;
}

bool rvr_skb_local_for(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!skb->dev || !(skb->dev->flags & IFF_LOOPBACK) ||
	    !net_eq(dev_net(skb->dev), dev_net(dev)))
		return false;
	if (skb->protocol == htons(ETH_P_IP))
		return __ip_dev_find(dev_net(dev), ip_hdr(skb)->daddr, false) == dev;
#if IS_ENABLED(CONFIG_IPV6)
	if (skb->protocol == htons(ETH_P_IPV6))
		return ipv6_chk_addr(dev_net(dev), &ipv6_hdr(skb)->daddr, dev, 0);
#endif
	return false;
}
