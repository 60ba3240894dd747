// i18n.ts — the explorer's UI language: the message dictionaries (lib/messages: `en`, and
// `zh-CN`, whose type requires every key of `en`), t(key, params) with named parameters
// ("{n} tokens"), plural forms chosen by Intl.PluralRules, numbers in parameters formatted
// by Intl.NumberFormat for the language, the browser-language default and <html lang>.
// The current language is Svelte state (lib/lang.svelte.ts), so whatever calls t() while
// rendering or drawing re-renders when setLang switches it. Token text, model names and
// data are never passed through here.

import { ui, type Lang } from './lang.svelte';
import { en, type MessageKey, type Messages, type Msg } from './messages/en';
import { zhCN } from './messages/zh-CN';
import { expose } from './testhook';

export type { Lang, MessageKey };
export const LANGS: readonly Lang[] = ['en', 'zh-CN'];
/** Each language's name as its speakers write it (the switch's labels). */
export const LANG_NAMES: Record<Lang, string> = { en: 'EN', 'zh-CN': '中文' };

const DICTS: Record<Lang, Messages> = { en, 'zh-CN': zhCN };

/** Keys of `en` that `dict` lacks or leaves empty (the type check's runtime twin, for dictionaries built at run time and the tests). */
export function missingKeys(dict: Partial<Record<string, Msg>>): string[] {
  return (Object.keys(en) as MessageKey[]).filter((k) => {
    const m = dict[k];
    return m === undefined || (typeof m === 'string' ? m === '' : !m.other);
  });
}

/** `v` when it names a language of the UI, else null. */
export function asLang(v: string | null | undefined): Lang | null {
  return v && (LANGS as readonly string[]).includes(v) ? (v as Lang) : null;
}

/** Chinese language tags written in simplified characters: zh, zh-CN, zh-SG, zh-Hans(-*). */
const SIMPLIFIED = /^zh(-(cn|sg|my|hans)(-.*)?)?$/;

/** The UI language for the browser's preferred languages (navigator.languages): the first one
 *  decides; Simplified Chinese tags (zh, zh-CN, zh-Hans, zh-SG) give zh-CN, any other en. */
export function detectLang(prefs: readonly string[]): Lang {
  const first = prefs.find((p) => p.trim() !== '');
  return first && SIMPLIFIED.test(first.trim().toLowerCase()) ? 'zh-CN' : 'en';
}

/** The current language (reactive: a caller re-runs when it changes). */
export function lang(): Lang {
  return ui.lang;
}

/** Switches the UI language and sets <html lang> and the page title. */
export function setLang(l: Lang): void {
  ui.lang = l;
  document.documentElement.lang = l;
  document.title = t('app.title');
}

const numberFormats = new Map<Lang, Intl.NumberFormat>();
const pluralRules = new Map<Lang, Intl.PluralRules>();

/** Groups digits from five digits on (12,345 but 2048), so indices and ids read as they are. */
const GROUPING = 'min2' as unknown as boolean;

/** `n` formatted for the current language (digit grouping, decimal sign); at most `digits` decimals. */
export function fmtNum(n: number, digits = 3): string {
  const l = ui.lang;
  if (digits !== 3) return new Intl.NumberFormat(l, { maximumFractionDigits: digits, useGrouping: GROUPING }).format(n);
  let f = numberFormats.get(l);
  if (!f) numberFormats.set(l, (f = new Intl.NumberFormat(l, { maximumFractionDigits: 3, useGrouping: GROUPING })));
  return f.format(n);
}

function plural(l: Lang, n: number): Intl.LDMLPluralRule {
  let r = pluralRules.get(l);
  if (!r) pluralRules.set(l, (r = new Intl.PluralRules(l)));
  return r.select(n);
}

const missing = missingKeys(zhCN);
if (missing.length) console.error(`zh-CN messages missing: ${missing.join(', ')}`);
/* for the browser tests: both dictionaries, the keys zh-CN lacks, and the detection rule */
expose('i18n', { dicts: DICTS, missing, detectLang });

export type Params = Record<string, string | number>;

/**
 * The message `key` in the current language with each `{name}` replaced by params[name]:
 * numbers are formatted for the language (fmtNum), strings are inserted as they are. A
 * plural message picks its form by params.n. Falls back to English for a key a
 * dictionary lacks.
 */
export function t(key: MessageKey, params?: Params): string {
  const l = ui.lang;
  const m: Msg = DICTS[l][key] ?? en[key];
  let s: string;
  if (typeof m === 'string') s = m;
  else {
    const n = Number(params?.n ?? 0);
    s = (plural(l, n) === 'one' ? m.one : undefined) ?? m.other;
  }
  if (!params) return s;
  return s.replace(/\{(\w+)\}/g, (all, name: string) => {
    const v = params[name];
    if (v === undefined) return all;
    return typeof v === 'number' ? fmtNum(v) : v;
  });
}

/** The message `${prefix}.${id}` (e.g. pattern.next-word), or `id` as it is when no dictionary names it. */
export function tName(prefix: 'pattern' | 'component', id: string): string {
  const k = `${prefix}.${id}`;
  return k in en ? t(k as MessageKey) : id;
}
