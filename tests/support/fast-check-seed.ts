import fc from "fast-check";

// Property tests explore new random inputs on every local run; CI replays a fixed seed, so a
// submission's verdict does not depend on the draw. A local failure prints its seed to replay.
if (process.env.CI) fc.configureGlobal({ seed: Number(process.env.FAST_CHECK_SEED ?? 20261130) });
