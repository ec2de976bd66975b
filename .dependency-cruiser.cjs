/**
 * The layering rules of src/, checked by `npm run deps` (part of `npm test`, so CI runs it).
 * Each folder under src/ is one stage and sits in one layer of LAYERS (top first); a stage may
 * lean on its own layer and the ones below it, never on one above, so a stage can be read, tested
 * and replaced without the ones above it. Within a layer the cycle rules keep the imports one-way.
 * docs/architecture.md describes each layer and folder; a new folder goes into LAYERS (and into
 * that doc) before it can hold code.
 */
const NODE_OR_PACKAGE = ["core", "npm", "npm-dev", "npm-optional", "npm-peer", "npm-bundled", "npm-no-pkg"];

/** The layers of src/, top first: one table, from which the layer rules below are generated. */
const LAYERS = [
  { layer: "entry", folders: ["cli", "calibrate", "demo", "doctor", "schemas"] },
  { layer: "after the run", folders: ["report", "verify"] },
  { layer: "run kinds", folders: ["study", "adjudicate", "session"] },
  { layer: "attempt machinery", folders: ["transport", "gateway", "mcp", "isolation", "image", "sandbox", "stand-ins", "credentials"] },
  { layer: "core", folders: ["loop", "budget", "ledger", "plan", "manifest", "cost", "claude", "transcript", "terms", "corpus", "export", "process", "profile", "util"] },
];

/** The path pattern of the modules in these src/ folders. */
const inFolders = (folders) => `^src/(${folders.join("|")})/`;
const ALL_FOLDERS = LAYERS.flatMap((l) => l.folders);

/** One rule per layer with a layer above it: its modules may not import any module of a higher layer. */
const layerRules = LAYERS.slice(1).map(({ layer, folders }, i) => ({
  name: "no-import-from-a-higher-layer",
  comment: `A module of the ${layer} layer (src/${folders.join(", src/")}) imports one of a layer above it (${LAYERS.slice(0, i + 1)
    .map((l) => l.layer)
    .join(", ")}): move the shared part down to this layer or below, or pass it in from above (docs/architecture.md).`,
  severity: "error",
  from: { path: inFolders(folders) },
  to: { path: inFolders(LAYERS.slice(0, i + 1).flatMap((l) => l.folders)) },
}));

/** Every module of src/ lives in a folder of LAYERS: one that imports, is imported, or stands alone. */
const UNPLACED = { path: "^src/", pathNot: inFolders(ALL_FOLDERS) };
const unplaced = {
  name: "every-src-folder-in-a-layer",
  comment: "A module of src/ lies outside the folders of the layer table: add its folder to LAYERS in .dependency-cruiser.cjs and to docs/architecture.md.",
  severity: "error",
};
const placementRules = [
  { ...unplaced, from: UNPLACED, to: {} },
  { ...unplaced, from: { path: "^src/" }, to: UNPLACED },
  { ...unplaced, from: { ...UNPLACED, orphan: true }, to: {} },
];

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...layerRules,
    ...placementRules,
    {
      name: "no-cycle-between-folders",
      comment: "Two src/ folders import each other, directly or through others: one of them must move down, or the shared part into a folder below both.",
      severity: "error",
      scope: "folder",
      from: { path: "^src/" },
      to: { circular: true },
    },
    {
      name: "no-cycle-between-modules",
      comment: "Two modules import each other, directly or through others: move the shared part into a module both import.",
      severity: "error",
      from: { path: "^src/" },
      to: { circular: true },
    },
    {
      name: "src-imports-only-src",
      comment: "src/ is what ships: it imports Node, its declared packages and src/, nothing from tests/, bench/, study/ or elsewhere.",
      severity: "error",
      from: { path: "^src/" },
      to: { pathNot: "^src/", dependencyTypesNot: NODE_OR_PACKAGE },
    },
    {
      name: "only-the-docker-adapter-imports-dockerode",
      comment:
        "Everything above the runtime port speaks the project's own types, so a fake or another engine can stand in: only src/sandbox/docker.ts and its loader (src/sandbox/dockerode-load.ts) may import dockerode.",
      severity: "error",
      from: { pathNot: "^src/sandbox/(docker|dockerode-load)\\.ts$" },
      to: { path: "(^|/)node_modules/(@types/)?dockerode/" },
    },
    {
      name: "stand-ins-only-for-the-demo",
      comment:
        'src/stand-ins/ holds the test doubles (the scripted Messages API, the fake claude image): only src/demo/ and src/calibrate/ may import them, besides bench/ and tests/; a study of the real CLI never leans on a stand-in (docs/architecture.md, "Stand-ins").',
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(stand-ins|demo|calibrate)/" },
      to: { path: "^src/stand-ins/" },
    },
    {
      name: "no-unresolvable-import",
      comment: "An import the checker cannot resolve is one it cannot judge; fix the path (or the resolver options below).",
      severity: "error",
      from: { path: "^src/" },
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsConfig: { fileName: "tsconfig.json" },
    // Type-only imports count: a type import still ties one stage's meaning to another's.
    tsPreCompilationDeps: true,
    // Packages such as @modelcontextprotocol/sdk are reached through their "exports" map only.
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      mainFields: ["module", "main", "types"],
    },
  },
};

// The layer table for the tests that hold docs/architecture.md to it (tests/unit/architecture-doc.test.ts):
// not enumerable, since dependency-cruiser refuses a configuration with keys it does not know.
Object.defineProperty(module.exports, "layers", { value: LAYERS, enumerable: false });
