import type { LoginLocation } from "../credentials/login.ts";
import { ATTEMPT_TIMEOUT_MS } from "../terms/limits.ts";
import { assertSocketOwner } from "../util/container-socket.ts";
import { RefusalError, errorMessage } from "../util/errors.ts";
import { readCredential, resolveCredentialSource, type CredentialSource } from "./credential.ts";
import { Gateway, type UpstreamOptions } from "./gateway.ts";
import { requestBound } from "./meter.ts";
import { probeUpstream, upstreamRefusal } from "./probe.ts";
import { picoToUsd, usdToPico } from "../cost/money.ts";
import type { CredentialMode } from "../terms/terms.ts";

/** Time beyond the attempt's time limit that the token must still be valid: the container's start and the last reply. */
export const EXPIRY_MARGIN_MS = 5 * 60_000;

export interface RunGateway {
  gateway: Gateway;
  source: CredentialSource;
  /** The real credential for the next attempt; a RefusalError when the host login would expire during it. */
  credentialFor(signal?: AbortSignal): Promise<string>;
  close(): void;
}

/**
 * Everything the gateway needs before anything is reserved: the runner can share a socket with
 * the container user, the credential is there and outlives the first attempt. Throws RefusalError
 * (exit 2, nothing reserved).
 */
export async function prepareRunGateway(o: {
  model: string;
  login: LoginLocation;
  tokenFile?: string;
  upstream?: UpstreamOptions;
  timeoutMs?: number;
  lockTimeoutMs?: number;
  lockStaleMs?: number;
  holder?: string;
  now?: () => number;
  /**
   * The per-unit limit and the flag that sets it: refused when it cannot hold one request of the
   * model (gatewayLimitProblem). Left out for a test stand-in that sends no request.
   */
  limit?: { usd: number; flag: string };
  /** Open a TLS connection to the upstream before anything is reserved (probeUpstream); off for a stand-in that sends no request. */
  probe?: boolean;
}): Promise<RunGateway> {
  const tooSmall = o.limit && gatewayLimitProblem(o.model, o.limit.usd, o.limit.flag);
  if (tooSmall) throw new RefusalError(tooSmall);
  try {
    assertSocketOwner("the model gateway");
  } catch (err) {
    throw new RefusalError(`${errorMessage(err)}; or use --credentials login-copy`);
  }
  const now = o.now ?? Date.now;
  const source = await resolveCredentialSource({ tokenFile: o.tokenFile, login: o.login });
  const lastUntil = () => now() + (o.timeoutMs ?? ATTEMPT_TIMEOUT_MS) + EXPIRY_MARGIN_MS;
  const read = (signal?: AbortSignal) => readCredential(source, { mustLastUntil: lastUntil(), lock: { timeoutMs: o.lockTimeoutMs, staleMs: o.lockStaleMs, holder: o.holder, signal } });
  // Checked here too, so an expiring login refuses the run before the first reservation.
  await read();
  // The route to the model API, proved before the first reservation (contract R192).
  if (o.probe) {
    const unreachable = await probeUpstream(o.upstream);
    if (unreachable) throw new RefusalError(upstreamRefusal(unreachable));
  }
  let gateway: Gateway;
  try {
    gateway = new Gateway({ model: o.model, upstream: o.upstream });
  } catch (err) {
    throw new RefusalError(errorMessage(err));
  }
  return { gateway, source, credentialFor: async (signal) => (await read(signal)).token, close: () => gateway.close() };
}

/** The options that choose and configure a run's gateway: the same fields in every kind's config (study, adjudication, sessions). */
export interface GatewayRunOptions {
  /**
   * gateway: the credential stays on the host, containers hold a placeholder and reach the API
   * only through the runner's metering gateway (docs/gateway.md); login-copy (the default here,
   * `--credentials` defaults to gateway): each container gets a copy of the CLI login.
   */
  credentials?: CredentialMode;
  /** A Messages API on a host unix socket (a test endpoint): the direct route, which the gateway refuses. */
  modelApi?: { socketPath: string };
  /** The file holding a `claude setup-token` token (else CLAUDE_CODE_OAUTH_TOKEN, else the host login). */
  oauthTokenFile?: string;
  /** Tests only (a hidden flag): the gateway's upstream and the CA it trusts. */
  gatewayUpstream?: UpstreamOptions;
  /** The unit's time limit: the token must outlive it (EXPIRY_MARGIN_MS beyond). */
  timeoutMs?: number;
  loginLockTimeoutMs?: number;
  /** Tests: after how long a dead run's login lock is taken over (acquireLoginLock's default otherwise). */
  loginLockStaleMs?: number;
}

/**
 * The run's gateway when its units go through it, undefined with login-copy; a RefusalError
 * (nothing reserved) when it cannot run. `limit` is the per-unit budget and its flag: one that
 * cannot hold one request would see every first request refused and its reservation charged for
 * nothing. The fake claude image sends no model request, so its limit is not held to that.
 */
export async function gatewayForRun(
  config: GatewayRunOptions,
  o: { model: string; login: LoginLocation; holder: string; limit: { usd: number; flag: string }; fakeImage: boolean },
): Promise<RunGateway | undefined> {
  if (config.credentials !== "gateway") return undefined;
  if (config.modelApi) throw new RefusalError("a Messages API socket (--model-api-socket) bypasses the gateway; use --credentials login-copy with it");
  return prepareRunGateway({
    limit: o.fakeImage ? undefined : o.limit,
    // The fake image sends no request: its upstream is probed only when a test names one.
    probe: !o.fakeImage || config.gatewayUpstream !== undefined,
    model: o.model,
    login: o.login,
    tokenFile: config.oauthTokenFile,
    upstream: config.gatewayUpstream,
    timeoutMs: config.timeoutMs,
    lockTimeoutMs: config.loginLockTimeoutMs,
    lockStaleMs: config.loginLockStaleMs,
    holder: o.holder,
  });
}

/**
 * The per-run-unit half of the gateway, shared by every kind that runs the CLI through it: the
 * real credential is read under the login lock when the unit is acquired (before its
 * reservation, so an expiring login reserves nothing) and released at once, since nothing is
 * written back; `input` is the `gateway` input of runCliInContainer for that unit.
 */
export function gatewayUnits<U>(g: RunGateway, o: { compareUsage: boolean; signal?: AbortSignal }) {
  const credentials = new Map<U, string>();
  return {
    async acquire(u: U): Promise<{ release: () => Promise<void> }> {
      credentials.set(u, await g.credentialFor(o.signal));
      return { release: async () => void credentials.delete(u) };
    },
    input(u: U, limitUsd: number, runRemainingUsd: () => number) {
      const credential = credentials.get(u);
      if (credential === undefined) throw new Error("gatewayUnits.input before acquire");
      return { gateway: g.gateway, credential, limitUsd, runRemainingUsd, compareUsage: o.compareUsage };
    },
  };
}

/**
 * The `max_tokens` the pinned CLI asks of every model it was measured with (claude-haiku-5-5 in
 * the gateway's conformance test, claude-sonnet-5-5 as the adjudicator in
 * tests/conformance/adjudicator-structured.test.ts).
 */
export const CLI_MAX_TOKENS = 128_000;

/**
 * A per-run limit that cannot hold the bound of even an empty request (docs/gateway.md, "The
 * ceiling") would see its first request refused and be charged its reservation for nothing: say
 * so before anything is reserved. Null when the limit can hold one request.
 */
export function gatewayLimitProblem(model: string, limitUsd: number, flag: string): string | null {
  const floor = requestBound(model, 0, CLI_MAX_TOKENS).costPico;
  if (usdToPico(limitUsd, "floor") >= floor) return null;
  const floorUsd = picoToUsd(floor);
  return `${flag} ${limitUsd} USD cannot hold one request of ${model} through the gateway, which bounds each request before sending it at more than ${floorUsd} USD (max_tokens ${CLI_MAX_TOKENS} at the output price; docs/gateway.md); raise ${flag} above that, or use --credentials login-copy; nothing was charged`;
}
