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
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const)
  NON_PUBLIC.addSubnet(net, prefix, "ipv4");
// IPv6 blocks that are not public whatever they carry: discard, documentation, IETF assignments
// (Teredo among them, whose IPv4 is obfuscated), NAT64 local use, unique local, link-local,
// site-local, multicast. The IPv4-embedding forms are judged by their IPv4 address (below).
for (const [net, prefix] of [
  ["64:ff9b:1::", 48],
  ["100::", 64],
  ["2001::", 23],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
] as const)
  NON_PUBLIC.addSubnet(net, prefix, "ipv6");

/** The eight 16-bit groups of an IPv6 address in any textual form (compressed, dotted tail, zone). */
function ipv6Groups(address: string): number[] | undefined {
  const text = address.replace(/%.*$/, "");
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  let head = text;
  const tail: number[] = [];
  if (dotted) {
    const octets = dotted[2]!.split(".").map(Number);
    if (octets.some((o) => o > 255)) return undefined;
    tail.push((octets[0]! << 8) | octets[1]!, (octets[2]! << 8) | octets[3]!);
    head = dotted[1]!.endsWith("::") ? dotted[1]! : dotted[1]!.slice(0, -1);
  }
  const parse = (part: string) => (part === "" ? [] : part.split(":").map((g) => parseInt(g, 16)));
  const halves = head.split("::");
  if (halves.length > 2) return undefined;
  const left = parse(halves[0]!);
  const right = [...(halves.length === 2 ? parse(halves[1]!) : []), ...tail];
  const missing = 8 - left.length - right.length;
  if (halves.length === 1 ? missing !== 0 : missing < 0) return undefined;
  const groups = [...left, ...Array<number>(Math.max(missing, 0)).fill(0), ...right];
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined;
}

const ipv4Of = (high: number, low: number) => `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;

/**
 * The IPv4 address an IPv6 address stands for, when it is one of the forms that carry one: a
 * stack or a NAT on the way may deliver such a packet to that IPv4 address, so it is judged by it.
 * IPv4-compatible `::a.b.c.d` (`::/96`, loopback and unspecified among them), IPv4-mapped
 * `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96`, NAT64 `64:ff9b::/96` and 6to4 `2002::/16`.
 */
export function embeddedIpv4(address: string): string | undefined {
  const g = ipv6Groups(address);
  if (!g) return undefined;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 6)) return ipv4Of(g[6]!, g[7]!);
  if (zeros(0, 5) && g[5] === 0xffff) return ipv4Of(g[6]!, g[7]!);
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) return ipv4Of(g[6]!, g[7]!);
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return ipv4Of(g[6]!, g[7]!);
  if (g[0] === 0x2002) return ipv4Of(g[1]!, g[2]!);
  return undefined;
}

/** True for an address on the public internet; false for loopback, private, reserved ranges and non-addresses. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !NON_PUBLIC.check(address, "ipv4");
  if (family !== 6) return false;
  const ipv4 = embeddedIpv4(address);
  if (ipv4 !== undefined) return isPublicAddress(ipv4);
  return !NON_PUBLIC.check(address.replace(/%.*$/, ""), "ipv6");
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
