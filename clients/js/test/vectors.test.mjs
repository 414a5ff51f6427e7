// The shared test vectors (../test-vectors.json), also run by the Python suite (tests/clients/test_vectors.py).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { ValidationError, toSendRequest as native } from "../src/index.js";
import { toSendRequest as postmark } from "../src/postmark.js";
import { toSendRequest as resend } from "../src/resend.js";
import { toSendRequest as sendgrid } from "../src/sendgrid.js";
import { toSendRequest as sesv2 } from "../src/sesv2.js";

const TRANSLATE = { native, sesv2, postmark, resend, sendgrid };

/** Expand the file's macros ($repeat, $concat, $list, $join, $flat), as the Python suite does. */
function expand(value) {
  if (Array.isArray(value)) return value.map(expand);
  if (value === null || typeof value !== "object") return value;
  if ("$repeat" in value) return value.$repeat.repeat(value.times);
  if ("$concat" in value) return value.$concat.map(expand).join("");
  if ("$list" in value) return Array.from({ length: value.times }, () => expand(value.$list));
  if ("$join" in value) return expand(value.$join).join(value.sep);
  if ("$flat" in value) return value.$flat.flatMap(expand);
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, expand(item)]));
}

const { cases } = JSON.parse(readFileSync(new URL("../../test-vectors.json", import.meta.url), "utf8"));

for (const testCase of cases.filter((c) => c.language === "both" || c.language === "js")) {
  test(`${testCase.style}-${testCase.language}-${testCase.name}`, () => {
    const input = expand(testCase.input);
    const translate = TRANSLATE[testCase.style];
    if ("request" in testCase) {
      assert.deepStrictEqual(translate(input), expand(testCase.request));
    } else {
      assert.throws(
        () => translate(input),
        (error) => {
          assert.ok(error instanceof ValidationError, `expected a ValidationError, got ${error}`);
          assert.equal(error.field, testCase.error.field, error.message);
          return true;
        },
      );
    }
  });
}
