// GENERATED FILE: do not edit. Regenerate with `node --import tsx tests/conformance/measure-requests.ts --write`
// (the real CLI in every scenario the runner uses, against the scripted Messages API at zero cost; 122 s).
// Claude Code 2.1.296, measured on 2026-12-02 from 16 requests.
import type { RequestShapes } from "./request-shape.ts";

export const CLI_REQUEST_SHAPES: RequestShapes = {
  cliVersion: "2.1.296",
  measuredOn: "2026-12-02",
  command: "node --import tsx tests/conformance/measure-requests.ts --write",
  scenarios: [
    "study pilot: an attempt of the repository arm and of the doc-bridge arm (tests/conformance/scripts.ts), the first answer of each with a thinking block",
    "adjudicator: one grader run per observation of that pilot, --json-schema (StructuredOutput)",
    "sessions: the session demo's two sessions, each a start and a --resume in a fresh container",
  ],
  requestCount: 16,
  requests: [
    {
      method: "POST",
      path: "/v1/messages",
      search: "?beta=true",
    },
  ],
  headers: [
    "accept",
    "accept-encoding",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "anthropic-version",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "host",
    "user-agent",
    "x-app",
    "x-claude-code-session-id",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
  ],
  anthropicBeta: [
    "claude-code-20250219",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "extended-cache-ttl-2025-04-11",
    "interleaved-thinking-2025-05-14",
    "mid-conversation-system-2026-04-07",
    "mid-conversation-tool-changes-2026-07-01",
    "oauth-2025-04-20",
    "per-turn-control-2026-07-01",
    "prompt-caching-scope-2026-01-05",
    "thinking-display-updates-2026-08-18",
    "thinking-token-count-2026-05-13",
  ],
  body: {
    object: {
      "": {
        context_management: {
          object: {
            "": {
              edits: {
                array: {
                  object: {
                    clear_thinking_20251015: {
                      keep: {
                        string: true,
                      },
                    },
                  },
                },
              },
            },
          },
        },
        max_tokens: {
          number: true,
        },
        messages: {
          array: {
            object: {
              "": {
                content: {
                  array: {
                    object: {
                      text: {
                        cache_control: {
                          object: {
                            ephemeral: {
                              ttl: {
                                string: true,
                              },
                            },
                          },
                        },
                        text: {
                          string: true,
                        },
                      },
                      thinking: {
                        signature: {
                          string: true,
                        },
                        thinking: {
                          string: true,
                        },
                      },
                      tool_result: {
                        content: {
                          string: true,
                        },
                        is_error: {
                          boolean: true,
                        },
                        tool_use_id: {
                          string: true,
                        },
                      },
                      tool_use: {
                        id: {
                          string: true,
                        },
                        input: {
                          any: "a tool call's arguments, chosen by the model and echoed back in the history",
                        },
                        name: {
                          string: true,
                        },
                      },
                    },
                  },
                  string: true,
                },
                output_config: {
                  object: {
                    "": {
                      effort: {
                        string: true,
                      },
                    },
                  },
                },
                role: {
                  string: true,
                },
              },
            },
          },
        },
        metadata: {
          object: {
            "": {
              user_id: {
                string: true,
              },
            },
          },
        },
        model: {
          string: true,
        },
        output_config: {
          object: {
            "": {
              effort: {
                string: true,
              },
            },
          },
        },
        stream: {
          boolean: true,
        },
        system: {
          array: {
            object: {
              text: {
                cache_control: {
                  object: {
                    ephemeral: {
                      ttl: {
                        string: true,
                      },
                    },
                  },
                },
                text: {
                  string: true,
                },
              },
            },
          },
        },
        thinking: {
          object: {
            adaptive: {
              display: {
                string: true,
              },
            },
          },
        },
        tools: {
          array: {
            object: {
              "": {
                description: {
                  string: true,
                },
                input_schema: {
                  any: "a tool's JSON Schema: data of the tool, not a request option",
                },
                name: {
                  string: true,
                },
              },
            },
          },
        },
      },
    },
  },
};
