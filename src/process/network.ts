import dgram from "node:dgram";
import dns from "node:dns";
import net from "node:net";

/**
 * Counts the network use this process can observe, from the moment `watchNetwork` is called:
 * socket connects (TCP and unix sockets apart), `fetch` calls, UDP sends and DNS lookups made
 * through node:dns. It covers this Node process only: a child (git) is not counted here, which is
 * why the dry run is also tested in a network namespace without interfaces. Connects made by
 * native code that bypasses node:net (none in this project) would not be seen.
 */
export interface NetworkCounts {
  inetConnects: number;
  unixSocketConnects: number;
  fetchCalls: number;
  udpSends: number;
  dnsLookups: number;
}

export interface NetworkWatch {
  counts(): NetworkCounts;
  /** Everything but unix-socket connects: what leaves the host or asks a resolver. */
  networkCalls(): number;
  stop(): void;
}

/** A unix-socket connect names a path (options.path, or a non-numeric string); anything else is TCP. */
function isUnixConnect(args: unknown[]): boolean {
  let first = args[0];
  if (Array.isArray(first)) first = first[0]; // net.connect hands connect() its normalised [options, callback]
  if (first !== null && typeof first === "object") return typeof (first as { path?: unknown }).path === "string";
  return typeof first === "string" && !/^\d+$/.test(first);
}

export function watchNetwork(): NetworkWatch {
  const counts: NetworkCounts = { inetConnects: 0, unixSocketConnects: 0, fetchCalls: 0, udpSends: 0, dnsLookups: 0 };
  const socketProto = net.Socket.prototype as unknown as { connect: (...args: unknown[]) => unknown };
  const dgramProto = dgram.Socket.prototype as unknown as { send: (...args: unknown[]) => unknown };
  const originals = { connect: socketProto.connect, send: dgramProto.send, fetch: globalThis.fetch, lookup: dns.lookup, promisesLookup: dns.promises.lookup };

  socketProto.connect = function (this: unknown, ...args: unknown[]) {
    if (isUnixConnect(args)) counts.unixSocketConnects++;
    else counts.inetConnects++;
    return originals.connect.apply(this, args);
  };
  dgramProto.send = function (this: unknown, ...args: unknown[]) {
    counts.udpSends++;
    return originals.send.apply(this, args);
  };
  if (originals.fetch) {
    globalThis.fetch = ((...args: Parameters<typeof fetch>) => {
      counts.fetchCalls++;
      return originals.fetch(...args);
    }) as typeof fetch;
  }
  (dns as { lookup: unknown }).lookup = function (this: unknown, ...args: unknown[]) {
    counts.dnsLookups++;
    return (originals.lookup as (...a: unknown[]) => unknown).apply(this, args);
  };
  (dns.promises as { lookup: unknown }).lookup = function (this: unknown, ...args: unknown[]) {
    counts.dnsLookups++;
    return (originals.promisesLookup as (...a: unknown[]) => unknown).apply(this, args);
  };

  return {
    counts: () => ({ ...counts }),
    networkCalls: () => counts.inetConnects + counts.fetchCalls + counts.udpSends + counts.dnsLookups,
    stop: () => {
      socketProto.connect = originals.connect;
      dgramProto.send = originals.send;
      if (originals.fetch) globalThis.fetch = originals.fetch;
      (dns as { lookup: unknown }).lookup = originals.lookup;
      (dns.promises as { lookup: unknown }).lookup = originals.promisesLookup;
    },
  };
}
