/**
 * The sentence every report carries about who adjudicated: the protocol asks for a different
 * model from the answering one, so a same-model adjudication is named a departure from it.
 */
export function adjudicatorSentence(a: { model: string; answeringModel: string; sameModel: boolean }): { text: string; departure: boolean } {
  if (a.sameModel) {
    return {
      text: `Departure from the protocol: the adjudicator was the answering model ${a.model} (--force-same-model), a different run of the same model; the protocol asks for a different model.`,
      departure: true,
    };
  }
  return { text: `Adjudicated by ${a.model}, a different model from the answering model ${a.answeringModel}, as the protocol asks.`, departure: false };
}
