/** The shapes of the measured price table and its rows, held in the calibration profile (src/profile/schema.ts). */
export type { GeneratedPriceTable, ModelPrices, TierPrices } from "../profile/schema.ts";
