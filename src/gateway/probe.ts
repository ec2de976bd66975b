import { connect as tlsConnect } from "node:tls";
import { isIP } from "node:net";
import { DEFAULT_UPSTREAM, type UpstreamOptions } from "./gateway.ts";

/** How long the gateway waits for the upstream's TLS handshake before it calls the model API unreachable. */
export const UPSTREAM_PROBE_TIMEOUT_MS = 5_000;

/** What a failed probe saw: the upstream's host (with its port when not 443) and the error. */
export interface UpstreamProblem {
  host: string;
  error: string;
}

/** The fix for an upstream the gateway cannot reach. */
export const upstreamFix = (host: string) =>
  `let this machine open HTTPS connections to ${host} (DNS, firewall, proxy, or the system's CA certificates), then check with \`study-runner doctor --transport cli\`; or use --credentials login-copy, where each attempt container reaches the API itself`;

/** The refusal of a run whose upstream failed the probe: the host, the error and the fix. */
export const upstreamRefusal = (p: UpstreamProblem) =>
  `the model API at ${p.host} cannot be reached from the gateway (${p.error}); nothing was reserved and no attempt started. Fix: ${upstreamFix(p.host)}`;

/**
 * Opens, from the host, the connection the gateway will use: TCP and a verified TLS handshake
 * to the upstream, with nothing sent over it (no request, no credential), then closes it. Null
 * when the handshake completed within the bounded wait; otherwise what failed (contract R192).
 */
export async function probeUpstream(upstream: UpstreamOptions | undefined, o: { timeoutMs?: number } = {}): Promise<UpstreamProblem | null> {
  const url = new URL(upstream?.url ?? DEFAULT_UPSTREAM);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port || 443);
  const timeoutMs = o.timeoutMs ?? UPSTREAM_PROBE_TIMEOUT_MS;
  const error = await new Promise<string | null>((resolve) => {
    const socket = tlsConnect({
      host,
      port,
      ...(isIP(host) ? {} : { servername: host }),
      ...(upstream?.ca ? { ca: upstream.ca } : {}),
      rejectUnauthorized: true,
    });
    const done = (result: string | null) => {
      clearTimeout(timer);
      socket.removeAllListeners("secureConnect");
      socket.on("error", () => undefined);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done(`no TLS handshake within ${timeoutMs / 1000} s`), timeoutMs);
    socket.once("secureConnect", () => done(null));
    socket.once("error", (err: NodeJS.ErrnoException) => done(`${err.code ?? "error"}: ${err.message}`));
  });
  return error === null ? null : { host: url.host, error };
}
