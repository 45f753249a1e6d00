/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rvrdma: C wrappers for the static inline functions and macros of the skb, socket, route and
 * netns headers that rust/net/ calls. Nothing here holds driver logic.
 */
#ifndef RVRDMA_NET_H
#define RVRDMA_NET_H

#include <linux/skbuff.h>
#include <linux/netdevice.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <net/sock.h>
#include <net/dst.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/route.h>
#include <net/ip6_route.h>
#include <net/net_namespace.h>
#include <net/udp_tunnel.h>
#include <net/addrconf.h>
#include <linux/inetdevice.h>

/* skb accessors */
void rvr_skb_reset_network_header(struct sk_buff *skb);
int rvr_skb_linearize(struct sk_buff *skb);
unsigned char *rvr_skb_linear_unshared(const struct sk_buff *skb, unsigned int *len);
void rvr_kfree_skb(struct sk_buff *skb);
struct sk_buff *rvr_alloc_skb(unsigned int size);
struct sk_buff *rvr_alloc_tx_skb(const struct net_device *ndev, unsigned int head,
				 unsigned int len);
unsigned char *rvr_skb_tx_headers(struct sk_buff *skb, struct net_device *ndev, __be16 proto,
				  struct dst_entry *dst, unsigned int ip_hlen);
void rvr_skb_detach(struct sk_buff *skb);
struct dst_entry *rvr_skb_dst(const struct sk_buff *skb);
bool rvr_skb_out_unqueued(const struct sk_buff *skb);

/* Paged payload: fragments that hold a page reference each, released when the skb is freed */
int rvr_skb_add_page_frag(struct sk_buff *skb, struct page *page, unsigned int off,
			  unsigned int len);
void *rvr_skb_add_trailer_frag(struct sk_buff *skb, unsigned int len);
/* A CRC-32 continued over @len bytes at @p (crc32_le's form); NULL stands for crc32_le */
typedef u32 (*rvr_crc32_fn)(u32 crc, const void *p, size_t len);
u32 rvr_skb_frags_crc32_le(const struct sk_buff *skb, u32 crc, u32 len, rvr_crc32_fn crc_fn);
int rvr_skb_copy_bits(const struct sk_buff *skb, u32 offset, void *to, u32 len);
bool rvr_skb_has_frag_list(const struct sk_buff *skb);
bool rvr_skb_frags_readable(const struct sk_buff *skb);

/* UDP GSO with a fragment list (SKB_GSO_FRAGLIST): each segment a complete packet of its own */
void rvr_skb_pass_owner(struct sk_buff *head, struct sk_buff *skb);
void rvr_skb_frag_list_append(struct sk_buff *head, struct sk_buff *tail, struct sk_buff *nskb);
void rvr_skb_set_udp_gso_list(struct sk_buff *skb, unsigned int gso_size, unsigned int segs);

/* skb queues */
void rvr_skb_queue_head_init(struct sk_buff_head *q);
void rvr_skb_queue_purge(struct sk_buff_head *q);

/* net devices, namespaces, sockets */
struct net *rvr_dev_net(const struct net_device *ndev);
struct net_device *rvr_init_net_dev_get_by_name(const char *name);
int rvr_netdev_ifindex(const struct net_device *ndev);
int rvr_dev_mc_gid(struct net_device *ndev, const u8 *gid, bool add);
int rvr_udp_sock_create(struct net *net, struct udp_port_cfg *cfg, struct socket **sockp);
struct sock *rvr_socket_sk(const struct socket *sock);
void *rvr_rcu_dereference_sk_user_data(const struct sock *sk);
void rvr_sock_hold(struct sock *sk);
void rvr_sock_put(struct sock *sk);

/* routes */
bool rvr_irqs_disabled(void);
struct rtable *rvr_ip_route_output_key(struct net *net, struct flowi4 *fl4);
struct dst_entry *rvr_rtable_dst(struct rtable *rt);
int rvr_dst_error(const struct dst_entry *dst);
struct dst_entry *rvr_dst_clone(struct dst_entry *dst);
struct dst_entry *rvr_dst_check(struct dst_entry *dst, u32 cookie);
/* Whether packets on `dst` leave through `dev` (not, say, through lo to a local address). */
bool rvr_dst_leaves_by(const struct dst_entry *dst, const struct net_device *dev);
/* Whether `dst` was released with its device (`dst_dev_put`, or moved to the blackhole device
 * when it went): it discards every packet. */
bool rvr_dst_dead(const struct dst_entry *dst);
u32 rvr_rt6_get_cookie(struct dst_entry *dst);

/* The receive backlog of a CPU (struct softnet_data): where it ends and how far it has been
 * processed, in packets (0 without CONFIG_RPS, which keeps these counters). */
unsigned int rvr_backlog_tail(unsigned int cpu);
unsigned int rvr_backlog_head(unsigned int cpu);
void rvr_local_bh_disable(void);
void rvr_local_bh_enable(void);
unsigned int rvr_this_cpu(void);
/* Whether the scheduler wants this CPU for another task now (need_resched). */
bool rvr_need_resched(void);
/* The CPU this task runs on, without the preemption check (raw_smp_processor_id). */
unsigned int rvr_raw_this_cpu(void);

/* The next online CPU after this one (wrapping), or -1 if this is the only one. Preemption
 * disabled: a CPU cannot finish going offline while the caller runs. */
int rvr_next_online_cpu(void);

/* Whether @skb came in on a loopback device for an address of @dev (a packet this host sent
 * to one of its own addresses on @dev). RCU read side. */
bool rvr_skb_local_for(const struct sk_buff *skb, const struct net_device *dev);

#endif
