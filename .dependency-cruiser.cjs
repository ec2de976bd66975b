/**
 * The layering rules of src/, checked by `npm run deps` (part of `npm test`, so CI runs it).
 * Each folder under src/ is one stage; a stage may lean on the stages below it, never on one
 * that leans on it, so a stage can be read, tested and replaced without the ones above it.
 */
const NODE_OR_PACKAGE = ["core", "npm", "npm-dev", "npm-optional", "npm-peer", "npm-bundled", "npm-no-pkg"];

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
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
      comment: "Everything above the runtime port speaks the project's own types, so a fake or another engine can stand in: only src/sandbox/docker.ts may import dockerode.",
      severity: "error",
      from: { pathNot: "^src/sandbox/docker\\.ts$" },
      to: { path: "(^|/)node_modules/(@types/)?dockerode/" },
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
