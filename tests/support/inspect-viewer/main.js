// The log viewer of the @metrevals/inspect-log-viewer package as `inspect view bundle` deploys it:
// the static-HTTP API reads `logs/listing.json` and the `.json` logs it names.
import { createElement } from "react";
import { createRoot } from "react-dom/client";
import { App, clientApi, initializeStore, simpleHttpApi } from "@metrevals/inspect-log-viewer";
import "@metrevals/inspect-log-viewer/styles/index.css";

const api = clientApi(simpleHttpApi("logs"));
initializeStore(api, { downloadFiles: false, webWorkers: false, streamSamples: false, streamSampleData: false, nativeFind: false }, undefined);
createRoot(document.getElementById("app")).render(createElement(App, { api }));
