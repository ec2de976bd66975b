import { createHash } from "node:crypto";
import { ManifestSchema, type Manifest } from "./schema.ts";
import { parseJsonAs, readFileFor, type JsonFileWords } from "../util/json-file.ts";

export interface LoadedManifest {
  path: string;
  manifest: Manifest;
  /** sha256 of the manifest file's bytes: the protocol hash. */
  protocolHash: string;
  bytes: Buffer;
}

/** How messages name the manifest at `path`. */
const manifestWords = (path: string): JsonFileWords => ({ name: `manifest ${path}`, readFix: "pass --manifest PATH", mismatch: "is invalid", written: "by-hand" });

export function parseManifest(bytes: Buffer, path: string): LoadedManifest {
  const manifest = parseJsonAs(bytes, ManifestSchema, manifestWords(path));
  return { path, manifest, bytes, protocolHash: createHash("sha256").update(bytes).digest("hex") };
}

export async function loadManifest(path: string): Promise<LoadedManifest> {
  return parseManifest(await readFileFor(path, manifestWords(path)), path);
}
