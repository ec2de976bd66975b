import type { NetworkSetting } from "../sandbox/port.ts";

/** The isolation profiles of `--isolation` (contract R71); what each guarantees is in docs/isolation.md. */
export const ISOLATION_PROFILES = ["standard", "strict", "offline"] as const;
export type IsolationProfile = (typeof ISOLATION_PROFILES)[number];

/**
 * The attempt container's network per profile: only standard gets the engine's default bridge;
 * strict and offline get none (strict's one way out is the proxy socket, which the runner adds).
 */
export function networkFor(profile: IsolationProfile): NetworkSetting {
  return profile === "standard" ? { mode: "bridge" } : { mode: "none" };
}

/** A `--runtime` value must be a runtime's name as an engine registers it; null when it is one. */
export function runtimeNameProblem(name: string, flag = "--runtime"): string | null {
  return /^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name) ? null : `${flag} ${JSON.stringify(name)} is not a runtime name such as runsc`;
}
