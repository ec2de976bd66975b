import { childProcessCounts } from "./child.ts";
import { watchNetwork, type NetworkCounts } from "./network.ts";

/**
 * What a command that promises "no network, no Claude process, only git" actually did, measured
 * from the moment `measureSideEffects` is called: children by command name (through the one
 * child-process module), and the network use of this process (src/process/network.ts says what
 * that covers). Containers start only through the runtime port, which such a command never loads.
 */
export interface SideEffects {
  /** Children started, by command name. */
  childProcesses: Record<string, number>;
  /** Children named claude (the CLI can only run as a child or in a container; no container is started). */
  claudeProcesses: number;
  /** TCP connects, fetch calls, UDP sends and DNS lookups of this process. */
  networkCalls: number;
  network: NetworkCounts;
}

export interface SideEffectMeasure {
  /** Stops measuring and returns what was seen since the start. */
  finish(): SideEffects;
}

export function measureSideEffects(): SideEffectMeasure {
  const before = childProcessCounts();
  const watch = watchNetwork();
  return {
    finish() {
      watch.stop();
      const childProcesses: Record<string, number> = {};
      for (const [name, n] of Object.entries(childProcessCounts())) {
        const since = n - (before[name] ?? 0);
        if (since > 0) childProcesses[name] = since;
      }
      return { childProcesses, claudeProcesses: childProcesses.claude ?? 0, networkCalls: watch.networkCalls(), network: watch.counts() };
    },
  };
}

/** Broken promises of a command that may start only `allowed` children and use no network. */
export function sideEffectViolations(seen: SideEffects, allowed: readonly string[]): string[] {
  const problems: string[] = [];
  const others = Object.keys(seen.childProcesses).filter((name) => !allowed.includes(name));
  if (others.length) problems.push(`started child processes other than ${allowed.join(", ")}: ${others.map((n) => `${n} (${seen.childProcesses[n]})`).join(", ")}`);
  if (seen.networkCalls > 0) problems.push(`used the network ${seen.networkCalls} time(s): ${JSON.stringify(seen.network)}`);
  return problems;
}
