import type { NetworkSetting } from "../attempt/spec.ts";

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
