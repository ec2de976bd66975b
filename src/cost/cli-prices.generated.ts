// GENERATED FILE: do not edit. Regenerate with `node --import tsx tests/conformance/measure-prices.ts --write`
// (every model the pinned binary names, measured against the real CLI at zero cost; 163 s).
// Claude Code 2.1.296, measured on 2026-12-01. USD per million tokens.
import type { GeneratedPriceTable } from "./price-types.ts";

export const GENERATED_PRICE_TABLE: GeneratedPriceTable = {
  "cliVersion": "2.1.296",
  "measuredOn": "2026-12-01",
  "command": "node --import tsx tests/conformance/measure-prices.ts --write",
  "searchedUpToPromptTokens": 4000000,
  "toleranceUsdPerToken": 1e-12,
  "models": {
    "claude-3-5-haiku": {
      "tier1": {
        "input": 0.8,
        "output": 4,
        "cacheRead": 0.08,
        "cacheWrite5m": 1,
        "cacheWrite1h": 1.6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-3-5-haiku-20241022": {
      "tier1": {
        "input": 0.8,
        "output": 4,
        "cacheRead": 0.08,
        "cacheWrite5m": 1,
        "cacheWrite1h": 1.6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-3-5-sonnet": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-3-5-sonnet-20241022": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-3-7-sonnet": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-3-7-sonnet-20250219": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-fable-5": {
      "tier1": {
        "input": 10,
        "output": 50,
        "cacheRead": 1,
        "cacheWrite5m": 12.5,
        "cacheWrite1h": 20
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-fable-5-1": {
      "tier1": {
        "input": 10,
        "output": 50,
        "cacheRead": 0.25,
        "cacheWrite5m": 12.5,
        "cacheWrite1h": 20
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-haiku-4-5": {
      "tier1": {
        "input": 1,
        "output": 5,
        "cacheRead": 0.1,
        "cacheWrite5m": 1.25,
        "cacheWrite1h": 2
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-haiku-4-5-20251001": {
      "tier1": {
        "input": 1,
        "output": 5,
        "cacheRead": 0.1,
        "cacheWrite5m": 1.25,
        "cacheWrite1h": 2
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-haiku-5-5": {
      "tier1": {
        "input": 0.1,
        "output": 0.5,
        "cacheRead": 0.01,
        "cacheWrite5m": 0.125,
        "cacheWrite1h": 0.2
      },
      "tier2": {
        "input": 0.5,
        "output": 2.5,
        "cacheRead": 0.05,
        "cacheWrite5m": 0.625,
        "cacheWrite1h": 1
      },
      "tier1MaxPromptTokens": 100000
    },
    "claude-mythos-5": {
      "tier1": {
        "input": 10,
        "output": 50,
        "cacheRead": 1,
        "cacheWrite5m": 12.5,
        "cacheWrite1h": 20
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-mythos-5-1": {
      "tier1": {
        "input": 10,
        "output": 50,
        "cacheRead": 0.25,
        "cacheWrite5m": 12.5,
        "cacheWrite1h": 20
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-4": {
      "tier1": {
        "input": 15,
        "output": 75,
        "cacheRead": 1.5,
        "cacheWrite5m": 18.75,
        "cacheWrite1h": 30
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-4-5": {
      "tier1": {
        "input": 5,
        "output": 25,
        "cacheRead": 0.5,
        "cacheWrite5m": 6.25,
        "cacheWrite1h": 10
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-4-5-20251101": {
      "tier1": {
        "input": 5,
        "output": 25,
        "cacheRead": 0.5,
        "cacheWrite5m": 6.25,
        "cacheWrite1h": 10
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-4-6": {
      "tier1": {
        "input": 5,
        "output": 25,
        "cacheRead": 0.5,
        "cacheWrite5m": 6.25,
        "cacheWrite1h": 10
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-4-7": {
      "tier1": {
        "input": 5,
        "output": 25,
        "cacheRead": 0.5,
        "cacheWrite5m": 6.25,
        "cacheWrite1h": 10
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-4-8": {
      "tier1": {
        "input": 5,
        "output": 25,
        "cacheRead": 0.5,
        "cacheWrite5m": 6.25,
        "cacheWrite1h": 10
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-5": {
      "tier1": {
        "input": 5,
        "output": 25,
        "cacheRead": 0.5,
        "cacheWrite5m": 6.25,
        "cacheWrite1h": 10
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-opus-5-5": {
      "tier1": {
        "input": 4,
        "output": 20,
        "cacheRead": 0.2,
        "cacheWrite5m": 5,
        "cacheWrite1h": 8
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-4": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-4-0": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-4-20250514": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-4-5": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-4-5-20250929": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-4-6": {
      "tier1": {
        "input": 3,
        "output": 15,
        "cacheRead": 0.3,
        "cacheWrite5m": 3.75,
        "cacheWrite1h": 6
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-5": {
      "tier1": {
        "input": 2,
        "output": 10,
        "cacheRead": 0.2,
        "cacheWrite5m": 2.5,
        "cacheWrite1h": 4
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    },
    "claude-sonnet-5-5": {
      "tier1": {
        "input": 2,
        "output": 10,
        "cacheRead": 0.1,
        "cacheWrite5m": 2.5,
        "cacheWrite1h": 4
      },
      "tier2": null,
      "tier1MaxPromptTokens": null
    }
  },
  "notPricedAsList": {
    "claude-3-haiku": {
      "initModel": "claude-3-haiku",
      "requestModel": "claude-3-haiku",
      "costBasis": "unknown",
      "modelUsageKeys": [
        "claude-3-haiku"
      ]
    },
    "claude-3-opus": {
      "initModel": "claude-3-opus",
      "requestModel": "claude-3-opus",
      "costBasis": "unknown",
      "modelUsageKeys": [
        "claude-3-opus"
      ]
    },
    "claude-3-sonnet": {
      "initModel": "claude-3-sonnet",
      "requestModel": "claude-3-sonnet",
      "costBasis": "unknown",
      "modelUsageKeys": [
        "claude-3-sonnet"
      ]
    },
    "claude-haiku-3-5": {
      "initModel": "claude-haiku-3-5",
      "requestModel": "claude-haiku-3-5",
      "costBasis": "unknown",
      "modelUsageKeys": [
        "claude-haiku-3-5"
      ]
    },
    "claude-mythos-preview": {
      "initModel": "claude-mythos-preview",
      "requestModel": "claude-mythos-preview",
      "costBasis": "unknown",
      "modelUsageKeys": [
        "claude-mythos-preview"
      ]
    },
    "claude-opus-4-0": {
      "initModel": "claude-opus-5-5",
      "requestModel": "claude-opus-5-5",
      "costBasis": "list",
      "modelUsageKeys": [
        "claude-opus-5-5"
      ]
    },
    "claude-opus-4-1": {
      "initModel": "claude-opus-5-5",
      "requestModel": "claude-opus-5-5",
      "costBasis": "list",
      "modelUsageKeys": [
        "claude-opus-5-5"
      ]
    },
    "claude-opus-4-1-20250805": {
      "initModel": "claude-opus-5-5",
      "requestModel": "claude-opus-5-5",
      "costBasis": "list",
      "modelUsageKeys": [
        "claude-opus-5-5"
      ]
    },
    "claude-opus-4-20250514": {
      "initModel": "claude-opus-5-5",
      "requestModel": "claude-opus-5-5",
      "costBasis": "list",
      "modelUsageKeys": [
        "claude-opus-5-5"
      ]
    },
    "claude-sonnet-3-7": {
      "initModel": "claude-sonnet-3-7",
      "requestModel": "claude-sonnet-3-7",
      "costBasis": "unknown",
      "modelUsageKeys": [
        "claude-sonnet-3-7"
      ]
    }
  },
  "aliases": {
    "haiku": {
      "initModel": "claude-haiku-5-5",
      "requestModel": "claude-haiku-5-5",
      "modelUsageKeys": [
        "claude-haiku-5-5"
      ],
      "costBasis": "list"
    },
    "sonnet": {
      "initModel": "claude-sonnet-5-5",
      "requestModel": "claude-sonnet-5-5",
      "modelUsageKeys": [
        "claude-sonnet-5-5"
      ],
      "costBasis": "list"
    },
    "opus": {
      "initModel": "claude-opus-5-5",
      "requestModel": "claude-opus-5-5",
      "modelUsageKeys": [
        "claude-opus-5-5"
      ],
      "costBasis": "list"
    }
  }
};
