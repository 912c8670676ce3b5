// Where a webhook may deliver. By default not to this machine or the networks around it: a webhook
// URL is chosen by an organization's admin, and the server's own neighbours (a metadata service at
// 169.254.169.254, a database on 10.0.0.5, an admin port on 127.0.0.1) are not theirs to reach.
// SLIPWAY_WEBHOOK_ALLOW_PRIVATE lets a self-hosted instance deliver inside its own network.
import dns from 'node:dns';
import net from 'node:net';
import type { LookupFunction } from 'node:net';

// Two lists: a BlockList checks an IPv4 address against its IPv6 rules too (as `::ffff:a.b.c.d`),
// and the IPv6 list below holds the whole mapped range.
const PRIVATE_V4 = new net.BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) PRIVATE_V4.addSubnet(network, prefix, 'ipv4');
// Besides this host, unique-local, the old site-local (still routed inside some networks),
// link-local, multicast and discard-only: the forms that carry an IPv4 address, which a gateway may
// reach (IPv4-compatible, mapped, SIIT-translated, NAT64, 6to4, Teredo).
const PRIVATE_V6 = new net.BlockList();
for (const [network, prefix] of [
  ['::', 96], ['::ffff:0:0', 96], ['::ffff:0:0:0', 96], ['64:ff9b::', 96], ['64:ff9b:1::', 48], ['2002::', 16],
  ['2001::', 32], ['fc00::', 7], ['fec0::', 10], ['fe80::', 10], ['ff00::', 8], ['100::', 64], ['2001:db8::', 32],
] as const) PRIVATE_V6.addSubnet(network, prefix, 'ipv6');

/**
 * True for an address of this host or of a private, shared, link-local, multicast or reserved
 * network, and for every IPv6 form that carries an IPv4 address (`::ffff:10.0.0.1`, 6to4, NAT64,
 * Teredo).
 */
export function isPrivateAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return PRIVATE_V4.check(address, 'ipv4');
  if (family !== 6) return true;
  return PRIVATE_V6.check(address, 'ipv6');
}

/** A URL's host as an address when it is one (`[::1]` → `::1`), else null. */
function literalAddress(hostname: string): string | null {
  const bare = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  return net.isIP(bare) === 0 ? null : bare;
}

export const WEBHOOK_URL_MAX_CHARS = 2000;

/**
 * Why `text` cannot be a webhook's URL, or null when it can: http(s), no credentials or fragment,
 * and (unless `allowPrivate`) no host that is an address of a private network or a name for this
 * machine. A name that resolves to such an address is refused when a delivery connects.
 */
export function webhookUrlProblem(text: string, allowPrivate: boolean): string | null {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'is not an absolute URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must be an http or https URL';
  if (url.href.length > WEBHOOK_URL_MAX_CHARS) return `is longer than ${WEBHOOK_URL_MAX_CHARS} characters once encoded (each character outside ASCII in the path or query takes up to 12)`;
  if (url.username !== '' || url.password !== '') return 'must not carry a user name or password (put a token in the path or query, or check the signature)';
  if (url.hash !== '' || text.includes('#')) return 'must not have a fragment';
  // Nothing listens on port 0, and no name with a label over 63 characters (or over 253 in all)
  // resolves: the deliveries would fail from the first.
  if (url.port === '0') return 'must not name port 0: give the port the receiver listens on, or none';
  const host = url.hostname.toLowerCase().replace(/\.$/, '');
  const address = literalAddress(host);
  if (address === null && (host.length > 253 || host.split('.').some((label) => label.length > 63))) {
    return 'has a host name that no DNS name can be (a label over 63 characters, or over 253 in all)';
  }
  if (allowPrivate) return null;
  if (address !== null ? isPrivateAddress(address) : host === 'localhost' || host.endsWith('.localhost') || !host.includes('.')) {
    return 'points at this machine or a private network, which webhooks do not reach (SLIPWAY_WEBHOOK_ALLOW_PRIVATE=true allows it)';
  }
  return null;
}

/**
 * The URL a valid webhook URL is kept and shown as: the one deliveries go to, as URL parsing
 * reads it (scheme and host in lower case, a default port and dot segments gone, `http:/x` as
 * `http://x/`), so that what the API answers is the address called.
 */
export function webhookUrl(text: string): string {
  return new URL(text).href;
}

export class AddressNotAllowedError extends Error {
  readonly code = 'EADDRNOTALLOWED';
}

/**
 * A `lookup` for outgoing connections that resolves as usual and keeps only addresses outside
 * private networks: a name that resolves inside one (or comes to, later) connects nowhere.
 */
export function publicOnlyLookup(): LookupFunction {
  return (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return (callback as (e: Error) => void)(error);
      const allowed = addresses.filter((a) => !isPrivateAddress(a.address));
      if (allowed.length === 0) {
        return (callback as (e: Error) => void)(new AddressNotAllowedError(`${hostname} resolves only to addresses of this machine or a private network`));
      }
      if (options.all) return (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, allowed);
      return callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  };
}

/** For a delivery: a URL whose host is an address of a private network, when those are not allowed. */
export function literalHostRefused(url: URL, allowPrivate: boolean): boolean {
  if (allowPrivate) return false;
  const address = literalAddress(url.hostname);
  return address !== null && isPrivateAddress(address);
}
