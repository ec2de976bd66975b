/** The body shape of measured requests (contract R140): what the gateway admits, inferred from what the CLI sent. */
import { variantOf, type ShapeNode } from "../gateway/request-shape.ts";
import { ownValue, setOwn } from "../util/own-keys.ts";
import type { JsonValue } from "../util/strict-json.ts";

/** The shape of `values` (inference for the measurement): `opaque` names members whose content is data, with the reason. */
export function inferShape(values: readonly JsonValue[], opaque: Readonly<Record<string, string>> = {}): ShapeNode {
  const node: ShapeNode = {};
  for (const v of values) addToShape(node, v, opaque);
  return node;
}

function addToShape(node: ShapeNode, v: JsonValue, opaque: Readonly<Record<string, string>>): void {
  if (v === null) node.null = true;
  else if (typeof v === "boolean") node.boolean = true;
  else if (typeof v === "number") node.number = true;
  else if (typeof v === "string") node.string = true;
  else if (Array.isArray(v)) {
    node.array ??= {};
    for (const e of v) addToShape(node.array, e, opaque);
  } else {
    node.object ??= {};
    const variant = variantOf(v);
    // Any string is a measured key: own members only (src/util/own-keys.ts).
    const members = ownValue(node.object, variant) ?? setOwn(node.object, variant, {});
    for (const [k, m] of Object.entries(v)) {
      if (k === "type" && variant !== "") continue;
      if (Object.hasOwn(opaque, k)) setOwn(members, k, { any: opaque[k]! });
      else addToShape(ownValue(members, k) ?? setOwn(members, k, {}), m, opaque);
    }
  }
}
