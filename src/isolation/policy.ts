/**
 * The strict profile's egress policy (contract R72): which CONNECT targets the runner's proxy opens.
 * Only host names on the allowlist, only port 443, never a raw IP literal, and never a name that
 * resolves to an address outside the public internet (loopback, private, link-local, ...), so a
 * hostile or mistaken resolver cannot turn an allowed name into a path to the host's own network.
 */
import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";
import { UsageError } from "../util/errors.ts";

/** The only port a tunnel may go to: the CLI speaks HTTPS to every host it needs. */
export const EGRESS_PORT = 443;

/**
 * The hosts the pinned CLI needs under CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (the image's
 * setting): the Messages API and the OAuth token endpoint its login refresh posts to. Not
 * measured here (no network); from public reports, see docs/isolation.md: the CLI refreshes at
 * https://platform.claude.com/v1/oauth/token since about 2.1.81 (anthropics/claude-code#47754).
 */
export const DEFAULT_EGRESS_ALLOW: readonly string[] = ["api.anthropic.com", "platform.claude.com"];

const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const HOST_NAME_RE = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})*$`);

/** Lowercase, without one trailing dot: `API.Anthropic.com.` and `api.anthropic.com` are one host. */
export function normalizeHost(host: string): string {
  return host.toLowerCase().replace(/\.$/, "");
}

/**
 * `--egress-allow` values (each a comma-separated list) into the allowlist. Every entry must be a
 * plain DNS name: no IP literal (those are refused anyway), no wildcard, no port, no scheme.
 * Throws UsageError naming each bad entry.
 */
export function parseEgressAllow(values: readonly string[]): string[] {
  const hosts: string[] = [];
  const problems: string[] = [];
  for (const raw of values.flatMap((v) => v.split(","))) {
    const entry = raw.trim();
    if (entry === "") continue;
    const host = normalizeHost(entry);
    if (isIP(host.replace(/^\[|\]$/g, ""))) problems.push(`--egress-allow ${entry}: an IP address; the proxy refuses raw IPs, give a host name`);
    else if (!HOST_NAME_RE.test(host)) problems.push(`--egress-allow ${entry}: not a host name (letters, digits, '-' and '.', no wildcard, port or scheme)`);
    else if (!hosts.includes(host)) hosts.push(host);
  }
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  if (hosts.length === 0) throw new UsageError("--egress-allow names no host; give at least one, e.g. --egress-allow api.anthropic.com");
  return hosts;
}

const NON_PUBLIC = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8], ["10.0.0.0", 8], ["100.64.0.0", 10], ["127.0.0.0", 8], ["169.254.0.0", 16], ["172.16.0.0", 12],
  ["192.0.0.0", 24], ["192.0.2.0", 24], ["192.88.99.0", 24], ["192.168.0.0", 16], ["198.18.0.0", 15],
  ["198.51.100.0", 24], ["203.0.113.0", 24], ["224.0.0.0", 4], ["240.0.0.0", 4],
] as const) NON_PUBLIC.addSubnet(net, prefix, "ipv4");
// IPv6: unspecified, loopback, NAT64 and 6to4 (they embed IPv4 addresses), discard, documentation,
// IETF assignments (Teredo among them), unique local, link-local, site-local, multicast.
for (const [net, prefix] of [
  ["::", 128], ["::1", 128], ["64:ff9b::", 96], ["64:ff9b:1::", 48], ["100::", 64], ["2001::", 23], ["2001:db8::", 32],
  ["2002::", 16], ["fc00::", 7], ["fe80::", 10], ["fec0::", 10], ["ff00::", 8],
] as const) NON_PUBLIC.addSubnet(net, prefix, "ipv6");

/** True for an address on the public internet; false for loopback, private, reserved ranges and non-addresses. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !NON_PUBLIC.check(address, "ipv4");
  if (family !== 6) return false;
  // An IPv4-mapped address is the IPv4 address it carries.
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return isPublicAddress(mapped[1]!);
  if (/^::ffff:/i.test(address)) return false;
  return !NON_PUBLIC.check(address, "ipv6");
}

/** Where a tunnel to an allowed `host:port` is opened. */
export interface Target {
  address: string;
  port: number;
}

/** Maps an allowed host and port to the address to dial; throws EgressRefusal when policy forbids it. */
export type Resolve = (host: string, port: number) => Promise<Target>;

/** A refusal by policy (as opposed to a failure such as a DNS error): the request counts as refused. */
export class EgressRefusal extends Error {
  override readonly name = "EgressRefusal";
}

type LookupAll = (host: string) => Promise<Array<{ address: string; family: number }>>;
const systemLookup: LookupAll = (host) => lookup(host, { all: true, verbatim: true });

/**
 * The production resolver: the host's system resolver, then every address it returns must be
 * public. One non-public answer refuses the name (fail closed: a name that resolves into the
 * host's network even once is not what the allowlist meant).
 */
export function systemResolver(lookupAll: LookupAll = systemLookup): Resolve {
  return async (host, port) => {
    const answers = await lookupAll(host);
    if (answers.length === 0) throw new Error(`${host} did not resolve`);
    const inner = answers.find((a) => !isPublicAddress(a.address));
    if (inner) throw new EgressRefusal(`${host} resolves to ${inner.address}, which is not a public address`);
    return { address: answers[0]!.address, port };
  };
}
