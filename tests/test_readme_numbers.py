"""The figures of the README and of the site pages its long prose moved to, each checked against a named key of a named
file under `outputs/`.

The text checked is `DOCS`: README.md (nbs/index.ipynb's export, with the headline table) and the markdown cells of
nbs/guide.ipynb (the install and the main job in detail) and nbs/results_notes.ipynb (the results in full, the section
`SECTION`), read as one text, so that a figure is checked wherever it lives. Its blocks: in a section of `PROSE`, each
paragraph that cites `outputs/` (titled with the section's heading) and each table row that does (titled
`<heading>: <the row's first cell>`); and each block of `SECTION` (its bold title, or `intro` before the first).

`FIGURES` is the table: the block a figure is printed in (a block title, or the start of one),
the figure as printed, the file under `outputs/` and the key path of the value it shows, and a scale where the file
holds a fraction that the text shows as a percent. For each row the test checks that the figure is still printed in
that block, and that the value at that key, scaled, rounds to the figure at the digits it is printed with (either
rounding direction of a tie; `17k`: to the thousand; `3.2e-15`: to the printed significant digits). A figure that
changes in its file fails the test with a message naming the file, the key, the figure printed and the value found.

Key paths: dotted keys (`results.ours.programs_per_s`; a key holding dots or brackets in double quotes), `[i]` for a
list index, and `[key=value]` filters over a list of objects (chained filters narrow it down; a key after filters
needs exactly one object left): `demo.rows[config=no_facts_kg_guided].accuracy`. A CSV file is a list of rows (its
values are read as numbers); a text file (.log, .md) is read with `re:<regex>`, the first group being the value.

The results page `outputs/README.md` is generated from the same files by `kgqa_nb.eval.report` (`make report`): the test
checks that it is exactly what the report module writes from the committed outputs, so each of its figures is a file's.

A coarser net stays for the blocks' other numbers (sample sizes, settings, secondary figures): each must occur, at its
printed precision, in some file its block cites (`outputs/...` in backticks; a folder means its .md/.json/.csv files;
files over 5 MB and .jsonl/.ipynb are not read). That net cannot tell which number is which (a block citing a large
folder matches nearly anything), which is why the headline figures are in `FIGURES`. Figures quoted from the papers are
in `FIGURES` too where an output records them (`seed_reference` and the like); `QUOTED` lists the rest with their
source. Not counted as numbers: text inside `code` spans, the phrase "95% CI", version strings with two dots, digits
that are part of a name or label (`Qwen2.5`, `Hits@1`, `KB-Coder(6)`, `1.5B`, `3-hop`, the `1-N` of 1-N scoring).
"""
import csv, io, json, re, sys
from decimal import ROUND_HALF_DOWN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT/'README.md'
DOCS = [README, ROOT/'nbs'/'guide.ipynb', ROOT/'nbs'/'results_notes.ipynb']  # README, then the pages its prose moved to
OUTPUTS = ROOT/'outputs'
SECTION = '## Current results (measured on the project\'s 2-core CPU machines)'  # in nbs/results_notes.ipynb
TWO, HEAD = 'The two commands in detail', 'Headline results'  # the guide's section, the README's table
PROSE = (TWO, HEAD)  # sections whose paragraphs (a table: rows) that cite outputs/ are blocks
MAX_BYTES = 5_000_000

C, CM = 'constrained.json', 'constrained_complex_metaqa.json'
MQ, KB, NS, BC = 'metaqa_pipelines.json', 'metaqa_kbcoder.json', 'metaqa_nskgqa.json', 'bench_complex.json'
LOG = 'fresh_clone/make_main.log'
LOG_IDLE = 'fresh_clone/make_main_e37694a.log'  # the same on an idle machine, an earlier commit


def grid(block: str, file: str, config: str, *figures: str) -> list[tuple]:
    "Rows of one like-for-like configuration as the README's table prints them: accuracy, CI, SER, s/q, tokens."
    keys = ['accuracy', 'ci95[0]', 'ci95[1]', 'ser', 'seconds', 'llm_tokens']
    return [(block, f, f'{file}: demo.rows[config={config}].{k}') for f, k in zip(figures, keys)]


GC, CX = 'Grammar-constrained generation', 'Complex MetaQA under the grammar'
H_DEMO, H_CX, H_MQ, H_SYM, H_KBC, H_NS, H_SER, H_EX = (f'{HEAD}: {row}' for row in (  # the headline table's rows
    'CodeAlignKGQA (`no_facts_kg_guided`, the earlier default)', 'CodeAlignKGQA (`no_facts_kg_guided`)',
    'CodeAlignKGQA (`no_facts_kg`', 'SymKGQA', 'KB-Coder(1)-R', 'NS-KGQA (phrases', 'CodeAlignKGQA, syntax grammar',
    'KoPL executor'))
H_MQI, H_NAT, H_LEV, H_LEVCX, H_PQ, H_WC, H_NSPQ = (f'{HEAD}: {row}' for row in (
    'CodeAlignKGQA, demonstrations induced', 'CodeAlignKGQA on questions we wrote', 'CodeAlignKGQA on held-out levels',
    "CodeAlignKGQA on Complex MetaQA's held-out levels", 'CodeAlignKGQA on PathQuestion',
    'CodeAlignKGQA on WorldCup2014', 'NS-KGQA on PathQuestion'))
NEW = 'single_call_paths'  # the default chosen on natural_dev, the levels' val split and the dev levels
OWN = 'own_kg.json: kgs'
FIGURES = [  # (README block, figure as printed, 'file under outputs/: key path'[, scale])
    (TWO, '15.91', 'run_kqapro/metrics.json: summary.all.seconds'),
    (TWO, '256', fr'{LOG}: re:^make install: exit 0, (\d+) s'),
    (TWO, '291', fr'{LOG}: re:^make main \(after install\): exit 0, (\d+) s'),
    (TWO, '547', fr'{LOG}: re:both: (\d+) s'),
    (TWO, '0', fr'{LOG}: re:grep -c tilezero: (\d+)'),
    (TWO, '10.95', fr'{LOG}: re:^this run +\d+ +[\d.]+ +[\d.-]+ +[\d.]+ +([\d.]+)'),
    (TWO, '75.0', fr'{LOG}: re:^this run +\d+ +([\d.]+)'),
    (TWO, '43.95', 'llm_build.json: builds.portable.prompt_tok_s'),
    (TWO, '40.14', 'llm_build.json: builds.native.prompt_tok_s'),
    (TWO, '6.04', 'llm_build.json: builds.portable.gen_tok_s'),
    (TWO, '3.46', 'llm_build.json: builds.native.gen_tok_s'),
    (TWO, '432', fr'{LOG_IDLE}: re:^make install: exit 0, (\d+) s'),
    (TWO, '321', fr'{LOG_IDLE}: re:^make main \(after install\): exit 0, (\d+) s'),
    (TWO, '753', fr'{LOG_IDLE}: re:both: (\d+) s'),
    (TWO, '11.996', fr'{LOG_IDLE}: re:^this run +\d+ +[\d.]+ +[\d.-]+ +[\d.]+ +([\d.]+)'),
    (TWO, '79.17', f'{C}: headline.main_job_reference.grid_same_questions'),
    (TWO, '67.71', f'{C}: headline.main_job_reference.grid_other_questions'),
    (TWO, '120', f'{C}: headline.grid_best.n'),
    (TWO, '96', f'{C}: main_job_subset.grid_other_questions.all.n'),
    ('KoPL executor', '17k', 'bench_executor.json: kb.entities'),
    ('KoPL executor', '3,000', 'bench_executor.json: parameters.n_programs'),
    ('KoPL executor', '8,605', 'bench_executor.json: results.ours.programs_per_s'),
    ('KoPL executor', '4.9', 'bench_executor.json: results.ours.load_s'),
    ('KoPL executor', '547', 'bench_executor.json: results.ours.rss_after_load_mb'),
    ('KoPL executor', '100%', 'bench_executor.json: agreement.ours_vs_kopl', 100),
    ('KoPL executor', '349', 'bench_executor.json: results.kopl.programs_per_s'),
    ('KoPL executor', '32.9', 'bench_executor.json: results.kopl.load_s'),
    ('KoPL executor', '658', 'bench_executor.json: results.kopl.rss_after_load_mb'),
    ('KoPL executor', '4,007', 'bench_executor.json: results.kopl-engine.programs_per_s'),
    ('KoPL executor', '8.2', 'bench_executor.json: results.kopl-engine.load_s'),
    ('KoPL executor', '1,853', 'bench_executor.json: results.kopl-engine.rss_after_load_mb'),
    ('KoPL executor', '91.8%', 'bench_executor.json: agreement.kopl_vs_kopl_engine', 100),
    ('KoPL executor', '24.7x', 'bench_executor.json: targets.throughput_vs_kopl.value'),
    ('KoPL executor', '2.1x', 'bench_executor.json: targets.throughput_vs_kopl_engine.value'),
    *[('SPARQL engines at three sizes', f, f'bench_sparql.json: results[engine={e}][scale={s}].{k}') for f, e, s, k in [
        ('14,492', 'memory', 1, 'programs_per_s'), ('6,354', 'memory', 4, 'programs_per_s'),
        ('1,118', 'memory', 16, 'programs_per_s'), ('83.9', 'memory', 16, 'load_s'),
        ('1,127', 'memory', 16, 'disk_mb'), ('7,622', 'memory', 16, 'rss_mb'),
        ('62', 'virtuoso', 1, 'programs_per_s'), ('41', 'virtuoso', 4, 'programs_per_s'),
        ('20', 'virtuoso', 16, 'programs_per_s'), ('589.6', 'virtuoso', 16, 'load_s'),
        ('1,860', 'virtuoso', 16, 'disk_mb'), ('2,764', 'virtuoso', 16, 'rss_mb'),
        ('28', 'oxigraph-embedded', 1, 'programs_per_s'), ('734.3', 'oxigraph-embedded', 16, 'load_s'),
        ('9,120', 'oxigraph-embedded', 16, 'disk_mb'), ('289', 'oxigraph-embedded', 16, 'rss_mb'),
        ('30', 'oxigraph-server', 1, 'programs_per_s'), ('0.04', 'oxigraph-server', 16, 'programs_per_s'),
        ('507.6', 'oxigraph-server', 16, 'load_s'), ('6,001', 'oxigraph-server', 16, 'disk_mb'),
        ('359', 'oxigraph-server', 16, 'rss_mb'), ('451', 'oxigraph-embedded', 4, 'programs_run'),
        ('412', 'oxigraph-server', 4, 'programs_run'), ('756', 'oxigraph-embedded', 16, 'programs_run'),
        ('15', 'oxigraph-server', 16, 'programs_run'), ('64,935,595', 'virtuoso', 16, 'triples')]],
    ('SPARQL engines at three sizes', '469', 'bench_sparql.json: in_memory_limit.mb_per_scale'),
    ('SPARQL engines at three sizes', '52', 'bench_sparql.json: in_memory_limit.largest_scale_that_fits'),
    *[('KG embeddings', f, f'{BC}: link_prediction[system={s}][dataset={d}]{x}.{k}') for f, s, d, x, k in [
        ('0.945', 'kgqa_nb', 'UMLS', '', 'mrr'), ('34', 'kgqa_nb', 'UMLS', '', 'seconds'),
        ('0.857', 'kgqa_nb', 'Kinships', '', 'mrr'), ('40', 'kgqa_nb', 'Kinships', '', 'seconds'),
        ('0.148', 'pykeen 1.11.1', 'UMLS', '[setting=defaults]', 'mrr'),
        ('92', 'pykeen 1.11.1', 'UMLS', '[setting=defaults]', 'seconds'),
        ('0.236', 'pykeen 1.11.1', 'Kinships', '[setting=defaults]', 'mrr'),
        ('111', 'pykeen 1.11.1', 'Kinships', '[setting=defaults]', 'seconds'),
        ('0.316', 'pykeen 1.11.1', 'UMLS', '[setting=strongest]', 'mrr'),
        ('99', 'pykeen 1.11.1', 'UMLS', '[setting=strongest]', 'seconds'),
        ('0.386', 'pykeen 1.11.1', 'Kinships', '[setting=strongest]', 'mrr'),
        ('120', 'pykeen 1.11.1', 'Kinships', '[setting=strongest]', 'seconds'),
        ('0.095', 'pykeen 1.11.1', 'UMLS', '[setting=benchmark_best]', 'mrr'),
        ('86', 'pykeen 1.11.1', 'UMLS', '[setting=benchmark_best]', 'seconds'),
        ('0.183', 'pykeen 1.11.1', 'Kinships', '[setting=benchmark_best]', 'mrr'),
        ('112', 'pykeen 1.11.1', 'Kinships', '[setting=benchmark_best]', 'seconds'),
        ('0.894', 'kgqa_nb', 'UMLS', '', 'literature_mrr'), ('0.823', 'kgqa_nb', 'Kinships', '', 'literature_mrr')]],
    ('KG embeddings', '1,500', f'{BC}: metaqa.config.max_seconds'),
    ('KG embeddings', '0.251', f'{BC}: metaqa.mrr'),
    ('KG embeddings', '0.350', f'{BC}: metaqa.hits10'),
    ('Gold programs', '11.7', 'benchgen_stats.csv: [benchmark=Demo][table=categories][row=Overall]'
                              '[metric=program-free acc.].value', 100),
    ('Gold programs', '17.1', 'benchgen_stats.csv: [benchmark=Complex MetaQA][table=categories][row=Overall]'
                              '[metric=program-free acc.].value', 100),
    *[('Facts extraction', f, f'facts_extraction/metrics.json: results[hop=all][theta={t}][bfs_hops={b}].{k}')
      for f, t, b, k in [('1.000', 0.7, 1, 'precision'), ('0.584', 0.7, 1, 'recall'), ('900', 0.7, 1, 'questions'),
                         ('0.694', 0.7, 3, 'recall'), ('0.639', 0.5, 1, 'precision'), ('0.745', 0.5, 1, 'recall')]],
    ('Facts extraction', '0.984', 'facts_extraction/metrics.json: seed_reference.precision'),
    ('Facts extraction', '0.613', 'facts_extraction/metrics.json: seed_reference.recall'),
    *[('CodeAlignKGQA and SymKGQA on MetaQA', f, f'{MQ}: summaries.{k}') for f, k in [
        ('98', 'codealign.metaqa-1hop.hits_at_1'), ('94', 'codealign.metaqa-2hop.hits_at_1'),
        ('92', 'codealign.metaqa-3hop.hits_at_1'), ('94.7', 'codealign.all.hits_at_1'),
        ('91.5', 'codealign.all.ci95[0]'), ('96.7', 'codealign.all.ci95[1]'), ('1.3', 'codealign.all.ser'),
        ('1.01', 'codealign.all.llm_calls'), ('2,541', 'codealign.all.prompt_tokens'),
        ('71', 'codealign.all.completion_tokens'), ('0.0021', 'codealign.all.seconds_by_stage.facts'),
        ('0.0041', 'codealign.all.seconds_by_stage.retrieval'), ('10.3', 'codealign.all.seconds_by_stage.llm_prompt'),
        ('5.9', 'codealign.all.seconds_by_stage.llm_generation'), ('92.7', 'no_grounding.all.hits_at_1'),
        ('87.3', 'no_grounding.all.ci95[0]'), ('95.9', 'no_grounding.all.ci95[1]'),
        ('90.0', 'no_correction.all.hits_at_1'), ('66.0', 'manual_demos.all.hits_at_1'),
        ('98.0', 'no_facts.all.hits_at_1'), ('94.3', 'no_facts.all.ci95[0]'), ('99.3', 'no_facts.all.ci95[1]'),
        ('97.3', 'facts_theta07.all.hits_at_1'), ('93.3', 'facts_theta07.all.ci95[0]'),
        ('99.0', 'facts_theta07.all.ci95[1]'), ('97.3', 'symkgqa.all.hits_at_1')]],
    ('CodeAlignKGQA and SymKGQA on MetaQA', '92.7',  # codealign itself on the 50-per-hop ablation subset
     'ablations/ablations.json: rows[system=CodeAlignKGQA][config=no_grounding][group=all].full_value'),
    *[('CodeAlignKGQA and SymKGQA on MetaQA', f, f'{MQ}: seed_reference.codealign_hits_at_1.{h}-hop')
      for f, h in [('99.6', 1), ('99.8', 2), ('99.7', 3)]],
    *[('KB-Coder on MetaQA, head to head', f, f'{KB}: runs.{k}') for f, k in [
        ('82', 'KB-Coder(1).summary.metaqa-1hop.hits_at_1'), ('86', 'KB-Coder(1).summary.metaqa-2hop.hits_at_1'),
        ('49', 'KB-Coder(1).summary.metaqa-3hop.hits_at_1'), ('72.3', 'KB-Coder(1).summary.metaqa-all.hits_at_1'),
        ('67.0', 'KB-Coder(1).summary.metaqa-all.ci95[0]'), ('77.1', 'KB-Coder(1).summary.metaqa-all.ci95[1]'),
        ('54.8', 'KB-Coder(1).summary.metaqa-all.tries_per_question'),
        ('3.5', 'KB-Coder(1).summary.metaqa-all.seconds_per_question'),
        ('96.3', 'KB-Coder(1)-R.summary.metaqa-all.hits_at_1'), ('93.6', 'KB-Coder(1)-R.summary.metaqa-all.ci95[0]'),
        ('97.9', 'KB-Coder(1)-R.summary.metaqa-all.ci95[1]'), ('0.3', 'KB-Coder(1)-R.summary.metaqa-all.fer_percent'),
        ('41.2', 'KB-Coder(1)-R.summary.metaqa-all.tries_per_question'),
        ('9.3', 'KB-Coder(1)-R.summary.metaqa-all.seconds_per_question'),
        ('74.7', 'KB-Coder(6).summary.metaqa-all.hits_at_1'), ('67.2', 'KB-Coder(6).summary.metaqa-all.ci95[0]'),
        ('81.0', 'KB-Coder(6).summary.metaqa-all.ci95[1]'),
        ('0.6', 'KB-Coder(6).summary.metaqa-all.sample_fer_percent'),
        ('391', 'KB-Coder(6).summary.metaqa-all.tries_per_question'),
        ('21.7', 'KB-Coder(6).summary.metaqa-all.seconds_per_question')]],
    *[('KB-Coder on MetaQA, head to head', f, f'{KB}: head_to_head.rows[kb_coder={v}][data=all].{k}') for f, v, k in [
        ('95.3', 'KB-Coder(6)', 'reference'), ('13', 'KB-Coder(1)-R', 'only_other'),
        ('8', 'KB-Coder(1)-R', 'only_reference'), ('0.38', 'KB-Coder(1)-R', 'mcnemar_p'),
        ('74', 'KB-Coder(1)', 'only_reference'), ('7', 'KB-Coder(1)', 'only_other'),
        ('3.2e-15', 'KB-Coder(1)', 'mcnemar_p'), ('35', 'KB-Coder(6)', 'only_reference'),
        ('4', 'KB-Coder(6)', 'only_other'), ('3.4e-07', 'KB-Coder(6)', 'mcnemar_p')]],
    *[('KB-Coder on MetaQA, head to head', f, f'{KB}: like_for_like.rows[system={s}][demonstrations={d}].all')
      for f, s, d in [('66.0', 'CodeAlignKGQA', 'fixed D'), ('71.3', 'KB-Coder(1)', 'fixed D'),
                      ('92.7', 'CodeAlignKGQA', 'retrieved'), ('94.7', 'KB-Coder(1)-R', 'retrieved')]],
    ('KB-Coder on MetaQA, head to head', '99.3', f'{C}: headline.metaqa.hits_at_1.all'),
    ('WebQSP, generation only', '1.0', 'webqsp_fer.json: runs.KB-Coder(1).summary.fer_percent'),
    ('WebQSP, generation only', '0.3', 'webqsp_fer.json: runs.KB-Coder(1).summary.fer_ci95[0]'),
    ('WebQSP, generation only', '3.6', 'webqsp_fer.json: runs.KB-Coder(1).summary.fer_ci95[1]'),
    ('WebQSP, generation only', '5.4', 'webqsp_fer.json: runs.KB-Coder(1).summary.seconds_per_question'),
    ('WebQSP, generation only', '200', 'webqsp_fer.json: runs.KB-Coder(1).summary.n'),
    ('WebQSP, generation only', '1', 'run_webqsp/kbcoder/metrics.json: summary.fer_percent'),
    ('WebQSP, generation only', '23', 'run_webqsp/codealign/metrics.json: summary.ser_percent'),
    ('WebQSP, generation only', '15.8', 'run_webqsp/codealign/metrics.json: summary.fer_ci95[0]'),
    ('WebQSP, generation only', '32.2', 'run_webqsp/codealign/metrics.json: summary.fer_ci95[1]'),
    ('WebQSP, generation only', '15.1', 'run_webqsp/codealign/metrics.json: summary.seconds_per_question'),
    ('WebQSP, generation only', '14', 'run_webqsp/codealign/metrics.json: summary.format_errors.DependencyError'),
    ('Generation SER', '63.0', 'generation_ser.json: summary.kqapro.ser_percent'),
    ('Generation SER', '200', 'generation_ser.json: summary.kqapro.n'),
    ('Generation SER', '17', 'generation_ser.json: summary.metaqa-1hop.ser_percent'),
    ('Generation SER', '68', 'generation_ser.json: summary.metaqa-2hop.ser_percent'),
    ('Generation SER', '79', 'generation_ser.json: summary.metaqa-3hop.ser_percent'),
    ('Generation SER', '2.84', 'generation_ser.json: seed_reference.kqapro_ser_percent_codellama_34b'),
    ('Generation SER', '63', 'generation_ser.json: summary.kqapro.errors.DependencyError'),
    ('Generation SER', '15', 'generation_ser.json: summary.kqapro.seconds_per_question_prefix_reuse'),
    ('Generation SER', '66.7', 'generation_ser.json: no_prefix_reuse.seconds_per_question'),
    ('Generation SER', '3,651', 'generation_ser.json: summary.kqapro.mean_prompt_tokens'),
    ('Generation SER', '1.3', f'{MQ}: summaries.codealign.all.ser'),
    *grid(GC, C, 'manual_demos', '26.7', '19.6', '35.2', '44.2', '34.8', '5,702'),
    *grid(GC, C, 'manual_demos_syntax', '29.2', '21.8', '37.8', '0.0', '11.2', '4,112'),
    *grid(GC, C, 'manual_demos_kg', '29.2', '21.8', '37.8', '0.0', '10.1', '4,113'),
    *grid(GC, C, 'codealign', '66.7', '57.8', '74.5', '20.0', '27.2', '3,419'),
    *grid(GC, C, 'codealign_syntax', '67.5', '58.7', '75.2', '0.0', '18.5', '2,702'),
    *grid(GC, C, 'codealign_kg', '67.5', '58.7', '75.2', '0.0', '16.6', '2,705'),
    *grid(GC, C, 'no_facts_kg', '67.5', '58.7', '75.2', '0.0', '10.9', '2,480'),
    *grid(GC, C, 'no_facts_kg_guided', '70.0', '61.3', '77.5', '0.0', '13.8', '3,092'),
    (GC, '70.0', f'{C}: headline.grid_best.accuracy'),
    (GC, '120', f'{C}: headline.grid_best.n'),
    (GC, '20', f'{C}: main_job_subset.grid_all.Logical.n'),
    (GC, '14.17', f'{C}: demo.rows[config=no_facts_kg_guided].regenerated_pct'),
    (GC, '6', f'{C}: demo.rows[config=no_facts_kg_guided].regenerated_then_answered'),
    (GC, '0.0', f'{C}: headline.kqapro_test_ser.ser'),
    (GC, '200', f'{C}: headline.kqapro_test_ser.n'),
    (GC, '400', f'{C}: headline.kqapro_test_ser.max_tokens'),
    (GC, '63.0', f'{C}: headline.kqapro_test_ser.unconstrained_same_questions.ser'),
    (GC, '23', f'{C}: headline.webqsp.codealign off.error_rate'),
    (GC, '0', f'{C}: headline.webqsp.codealign syntax.error_rate'),
    (GC, '15.1', f'{C}: headline.webqsp.codealign off.seconds'),
    (GC, '12.1', f'{C}: headline.webqsp.codealign syntax.seconds'),
    (GC, '1', f'{C}: headline.webqsp.kbcoder off.error_rate'),
    (GC, '5.0', f'{C}: headline.webqsp.kbcoder syntax.seconds'),
    (GC, '0.0774', f'{C}: per_token_overhead.mean_s_per_token.none'),
    (GC, '0.0842', f'{C}: per_token_overhead.mean_s_per_token.llguidance'),
    (GC, '0.0987', f'{C}: per_token_overhead.mean_s_per_token.gbnf'),
    (GC, '0.331', f'{C}: grammar_build.grammars[format=codealign][level=kg].build_s'),
    (GC, '613.5', f'{C}: grammar_build.grammars[format=codealign][level=kg].gbnf_kb'),
    (GC, '1.54', f'{C}: grammar_build.metaqa.codealign_kg_build_s'),
    (GC, '43,234', f'{C}: grammar_build.metaqa.sizes.entity'),
    (GC, '3497.5', f'{C}: grammar_build.metaqa.codealign_kg_gbnf_kb'),
    (GC, '70.56', f'{C}: seed_reference.hits_at_1'),
    *[('MetaQA under the KG-level grammar', f, f'{C}: headline.metaqa.{k}') for f, k in [
        ('98', 'hits_at_1.metaqa-1hop'), ('100', 'hits_at_1.metaqa-2hop'), ('100', 'hits_at_1.metaqa-3hop'),
        ('99.3', 'hits_at_1.all'), ('0', 'ser'), ('10.1', 'seconds'), ('300', 'n')]],
    ('MetaQA under the KG-level grammar', '97.6', 'constrained/metaqa_quoting/metrics.json: summary.all.ci95[0]'),
    ('MetaQA under the KG-level grammar', '99.8', 'constrained/metaqa_quoting/metrics.json: summary.all.ci95[1]'),
    *[('MetaQA under the KG-level grammar', f, f'constrained/metaqa/metrics.json: summary.{k}') for f, k in [
        ('90', 'metaqa-1hop.hits_at_1'), ('99', 'metaqa-2hop.hits_at_1'), ('95', 'metaqa-3hop.hits_at_1'),
        ('94.7', 'all.hits_at_1'), ('11.7', 'all.seconds')]],
    ('MetaQA under the KG-level grammar', '6', f'{C}: metaqa.guided.questions_sampled'),
    *grid(CX, CM, 'manual_demos', '22.0', '15.0', '31.1', '74.0', '41.1', '6,513'),
    *grid(CX, CM, 'manual_demos_syntax', '1.0', '0.2', '5.5', '0.0', '14.2', '3,860'),
    *grid(CX, CM, 'manual_demos_kg', '2.0', '0.6', '7.0', '0.0', '12.2', '3,854'),
    *grid(CX, CM, 'codealign', '58.0', '48.2', '67.2', '24.0', '22.7', '3,520'),
    *grid(CX, CM, 'codealign_syntax', '63.0', '53.2', '71.8', '0.0', '15.0', '2,727'),
    *grid(CX, CM, 'codealign_kg', '63.0', '53.2', '71.8', '0.0', '14.0', '2,728'),
    *grid(CX, CM, 'no_facts_kg', '67.0', '57.3', '75.4', '0.0', '11.0', '2,479'),
    *grid(CX, CM, 'no_facts_kg_guided', '70.0', '60.4', '78.1', '0.0', '14.7', '3,329'),
    (CX, '100', f'{CM}: headline.grid_best.n'),
    (CX, '17.00', f'{CM}: demo.rows[config=no_facts_kg_guided].regenerated_pct'),
    (CX, '6', f'{CM}: demo.rows[config=no_facts_kg_guided].regenerated_then_answered'),
    ('The main job', '75.0', 'run_kqapro/metrics.json: summary.all.hits_at_1'),
    ('The main job', '55.1', 'run_kqapro/metrics.json: summary.all.ci95[0]'),
    ('The main job', '88.0', 'run_kqapro/metrics.json: summary.all.ci95[1]'),
    ('The main job', '0', 'run_kqapro/metrics.json: summary.all.ser'),
    ('The main job', '15.9', 'run_kqapro/metrics.json: summary.all.seconds'),
    ('The main job', '24', f'{C}: headline.main_job_reference.n'),
    ('The main job', '4', f'{C}: headline.main_job_reference.categories.Logical'),
    ('The main job', '79.17', f'{C}: headline.main_job_reference.grid_same_questions'),
    ('The main job', '67.71', f'{C}: headline.main_job_reference.grid_other_questions'),
    ('The main job', '96', f'{C}: main_job_subset.grid_other_questions.all.n'),
    ('The main job', '70.0', f'{C}: headline.main_job_reference.grid_all'),
    ('The main job', '120', f'{C}: main_job_subset.grid_all.all.n'),
    ('The main job', '26.7', f'{C}: demo.rows[config=manual_demos].accuracy'),
    ('The main job', '44.2', f'{C}: demo.rows[config=manual_demos].ser'),
    *[('NS-KGQA on MetaQA', f, f'{NS}: settings.{s}.hits1.{h}.value', 100) for f, s, h in [
        ('96.1', 'realistic', 1), ('98.7', 'realistic', 2), ('97.2', 'realistic', 3),
        ('79.6', 'realistic-names', 1), ('83.9', 'realistic-names', 2), ('81.9', 'realistic-names', 3),
        ('97.0', 'oracle', 1), ('100', 'oracle', 2), ('100', 'oracle', 3),
        ('92.1', 'incomplete-kg', 1), ('93.2', 'incomplete-hybrid', 1)]],
    ('NS-KGQA on MetaQA', '1000', f'{NS}: protocol.n_per_hop'),
    *[('NS-KGQA on MetaQA', f, f'{NS}: paper_test_hits1.{h}') for f, h in [('62.54', 1), ('64.19', 2), ('60.32', 3)]],
    ('NS-KGQA on MetaQA', '1575', f'{NS}: kge.train_seconds'),
    ('NS-KGQA on MetaQA', '11966', f'{NS}: incomplete_kb.removed'),
    ('NS-KGQA on MetaQA', '0.251', f'{BC}: metaqa.mrr'),
    *[('NS-KGQA on MetaQA', f, f'{BC}: nations_literal_ablation.{k}', *s) for f, k, *s in [
        ('0.217', 'dual_random.mrr'), ('0.063', 'single.mrr'), ('75.3', 'dual_random.comparison_accuracy', 100),
        ('66.0', 'single.comparison_accuracy', 100), ('312', 'dual_random.comparisons'), ('26', 'folds'),
        ('0.243', 'dual_features.mrr'), ('75.6', 'dual_features.comparison_accuracy', 100),
        ('0.176', 'dual_encoder.mrr'), ('73.1', 'dual_encoder.comparison_accuracy', 100)]],
    # the README's headline table, row by row (a row's block is `Headline results: <its first cell>`): each figure with
    # its n, and its CI where the row shows one
    *grid(H_DEMO, C, 'no_facts_kg_guided', '70.0', '61.3', '77.5'), (H_DEMO, '120', f'{C}: headline.grid_best.n'),
    *grid(H_CX, CM, 'no_facts_kg_guided', '70.0', '60.4', '78.1'), (H_CX, '100', f'{CM}: headline.grid_best.n'),
    *[(H_MQ, f, f'constrained/metaqa_quoting/metrics.json: summary.all.{k}') for f, k in [
        ('99.3', 'hits_at_1'), ('97.6', 'ci95[0]'), ('99.8', 'ci95[1]'), ('300', 'n')]],
    *[(H_SYM, f, f'{MQ}: summaries.symkgqa.all.{k}') for f, k in [
        ('97.3', 'hits_at_1'), ('93.3', 'ci95[0]'), ('99.0', 'ci95[1]'), ('150', 'n')]],
    *[(H_KBC, f, f'{KB}: runs.KB-Coder(1)-R.summary.metaqa-all.{k}') for f, k in [
        ('96.3', 'hits_at_1'), ('93.6', 'ci95[0]'), ('97.9', 'ci95[1]'), ('300', 'n')]],
    *[(H_NS, f, f'{NS}: settings.induced.hits1.{h}.value', 100) for f, h in [('95.1', 1), ('98.9', 2), ('96.1', 3)]],
    *[(H_MQI, f, f'constrained/metaqa_induced/metrics.json: {k}') for f, k in [
        ('97.3', 'summary.all.hits_at_1'), ('94.8', 'summary.all.ci95[0]'), ('98.6', 'summary.all.ci95[1]'),
        ('300', 'summary.all.n')]],
    *[(H_NAT, f, f'generalization.json: headline.{k}') for f, k in [
        ('35.4', 'old_accuracy'), ('26.6', 'old_ci95[0]'), ('45.2', 'old_ci95[1]'), ('99', 'n'),
        ('83.8', 'default_accuracy'), ('75.4', 'default_ci95[0]'), ('89.8', 'default_ci95[1]'),
        ('12.5', 'default_s_per_question')]],
    *[(H_LEV, f, f'generalization.json: headline.held_out.{k}') for f, k in [
        ('68.8', 'test_iid.no_facts_kg_guided.accuracy'), ('43.8', 'test_compositional.no_facts_kg_guided.accuracy'),
        ('39.6', 'test_zero_shot.no_facts_kg_guided.accuracy'), ('48', 'test_iid.no_facts_kg_guided.n'),
        ('85.4', f'test_iid.{NEW}.accuracy'), ('83.3', f'test_compositional.{NEW}.accuracy'),
        ('64.6', f'test_zero_shot.{NEW}.accuracy')]],
    *[(H_LEVCX, f, f'generalization.json: headline.held_out_complex_metaqa.{k}') for f, k in [
        ('58.3', 'test_iid.no_facts_kg_guided.accuracy'), ('16.7', 'test_compositional.no_facts_kg_guided.accuracy'),
        ('25.0', 'test_zero_shot.no_facts_kg_guided.accuracy'), ('12', 'test_iid.no_facts_kg_guided.n'),
        ('66.7', f'test_iid.{NEW}.accuracy'), ('41.7', f'test_compositional.{NEW}.accuracy'),
        ('16.7', f'test_zero_shot.{NEW}.accuracy')]],
    *[(H_PQ, f, f'{OWN}.pathquestion.hits1.codealign.{k}') for f, k in [
        ('92.0', '2-hop.value'), ('52.0', '3-hop.value'), ('25', '2-hop.n'), ('25', '3-hop.n')]],
    *[(H_WC, f, f'{OWN}.worldcup2014.hits1.codealign.{k}') for f, k in [
        ('100.0', '2-hop.value'), ('56.0', 'conjunctive.value'), ('25', '2-hop.n'), ('25', 'conjunctive.n')]],
    *[(H_NSPQ, f, f'{OWN}.pathquestion.hits1.nskgqa.{k}') for f, k in [
        ('82.3', '2-hop.value'), ('61.3', '3-hop.value'), ('300', '2-hop.n'), ('300', '3-hop.n')]],
    (H_NS, '1,000', f'{NS}: protocol.n_per_hop'),
    (H_SER, '0.0', f'{C}: headline.kqapro_test_ser.ser'), (H_SER, '200', f'{C}: headline.kqapro_test_ser.n'),
    (H_SER, '63.0', f'{C}: headline.kqapro_test_ser.unconstrained_same_questions.ser'),
    (H_EX, '3,000', 'bench_executor.json: parameters.n_programs'),
    (H_EX, '8,605', 'bench_executor.json: results.ours.programs_per_s'),
    (H_EX, '24.7x', 'bench_executor.json: targets.throughput_vs_kopl.value'),
]
QUOTED = {  # figures from the literature that no output records: README number -> where it comes from
    '0.60': 'PyKEEN benchmarking study (github.com/pykeen/benchmarking, ablation/results/complex/kinships, '
            'hpo_complex_kinships_lcwa_adam, best pipeline): Kinships test MRR 0.603',
}

NUMBER = re.compile(r'(?<![\w@.])(?<!\w\()(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)*(?:e-\d+)?)([%xk]?)'
                    r'(?!\w|\.\d|-hop\b|-N\b)')
SOURCE_NUMBER = re.compile(r'\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
SOURCE_THOUSANDS = re.compile(r'\d{1,3}(?:,\d{3})+(?:\.\d+)?')  # `3,000` in .md tables
PATH = re.compile(r'`(outputs/[^`\s]+)`')  # `outputs/` alone (all of it) is no citation
TOKEN = re.compile(r'"([^"]+)"|\[([^\]]+)\]|([^.\[\]"]+)')  # a quoted key, a [selector] or a plain key


# ------------------------------------------------------------------ the blocks and their numbers
def paragraphs(text: str) -> list[str]: return [p.strip() for p in re.split(r'\n\s*\n', text) if p.strip()]


def doc_text(path: Path) -> str:
    "A markdown file's text, or a notebook's markdown cells joined by blank lines (as README.md is made)."
    text = path.read_text(encoding='utf-8')
    if path.suffix != '.ipynb': return text
    return '\n\n'.join(''.join(c['source']) for c in json.loads(text)['cells'] if c['cell_type'] == 'markdown')


def text_checked() -> str: return '\n\n'.join(doc_text(p) for p in DOCS)


def sections(text: str) -> list[tuple[str, str]]:
    "(`## ` heading without the hashes, the section's text up to the next `#`/`##` heading outside code fences)."
    out, fenced = [], False
    for line in text.split('\n'):
        if line.startswith('```'): fenced = not fenced
        if not fenced and re.match(r'#{1,2} ', line):  # a `#` title ends a section too
            out.append([line[3:].strip() if line.startswith('## ') else '', ''])
        elif out: out[-1][1] += line + '\n'
    return [(h, body) for h, body in out if h]


def blocks() -> list[tuple[str, str]]:
    "(title, text) for each paragraph that cites outputs/ in a `PROSE` section, then each block of `SECTION`."
    text = text_checked()
    assert SECTION in text, f'no section {SECTION!r} in {", ".join(p.name for p in DOCS)}'
    secs = dict(found := sections(text))
    wrong = [s for s in (*PROSE, SECTION.removeprefix('## ')) if [h for h, _ in found].count(s) != 1]
    assert not wrong, f'sections {wrong} are not in {", ".join(p.name for p in DOCS)} exactly once'
    results = []
    for p in paragraphs(secs[SECTION.removeprefix('## ')]):
        title = re.match(r'\*\*(.+?)\*\*', p)
        if title or not results: results.append([title[1] if title else 'intro', p])
        else: results[-1][1] += '\n\n' + p
    return [b for s in PROSE for b in prose_blocks(s, secs[s])] + [(t, b) for t, b in results]


def prose_blocks(section: str, text: str) -> list[tuple[str, str]]:
    "A `PROSE` section's paragraphs that cite outputs/; a table's rows that do, each a block `<section>: <first cell>`."
    out = []
    for p in paragraphs(text):
        if not PATH.search(p): continue
        lines = p.split('\n')
        if all(line.startswith('|') for line in lines):
            out += [(f'{section}: {r.strip("|").split("|")[0].strip()}', r) for r in lines if PATH.search(r)]
        else: out.append((section, p))
    return out


def block_text(block: str) -> str:
    "The text of the block(s) whose title starts with `block` (a `PROSE` section: all its citing paragraphs)."
    found = [(t, text) for t, text in blocks() if t.startswith(block)]
    assert len({t for t, _ in found}) == 1, f'{len({t for t, _ in found})} blocks are titled {block!r}...'
    return '\n\n'.join(text for _, text in found)


def readme_numbers(text: str) -> list[str]:
    "The numbers a block states, as written (commas removed), with a `k` kept for thousands."
    text = re.sub(r'`[^`]*`', ' ', text.replace('95% CI', ' '))
    return [n.replace(',', '') + (suffix if suffix == 'k' else '') for n, suffix in NUMBER.findall(text)
            if n.count('.') < 2]


def printed(figure: str) -> str:
    "A FIGURES figure the way `readme_numbers` returns it: `8,605` -> `8605`, `24.7x` -> `24.7`, `17k` stays."
    return figure.replace(',', '').rstrip('%x')


# ------------------------------------------------------------------ values at named keys of named files
def load(path: Path):
    "A JSON file's content, or a CSV file's rows (dicts of strings)."
    text = path.read_text(encoding='utf-8')
    return list(csv.DictReader(io.StringIO(text))) if path.suffix == '.csv' else json.loads(text)


def value_at(source: str):
    "The value that `'file: key path'` names (see the module docstring); KeyError says where the path breaks."
    rel, key = (s.strip() for s in source.split(':', 1))
    path = OUTPUTS/rel
    if key.startswith('re:'):
        m = re.search(key[3:], path.read_text(encoding='utf-8'), re.M)
        if not m: raise KeyError(f'no line matches {key[3:]!r}')
        return m[1]
    d = load(path)
    for quoted, selector, plain in TOKEN.findall(key):
        if selector and selector.lstrip('-').isdigit(): d = d[int(selector)]
        elif selector:
            k, v = selector.split('=', 1)
            d = [x for x in d if isinstance(x, dict) and str(x.get(k)) == v]
            if not d: raise KeyError(f'no item with {selector} (at [{selector}])')
        else:
            if isinstance(d, list):
                if len(d) != 1: raise KeyError(f'{len(d)} items left before {quoted or plain!r}: add a [key=value]')
                d = d[0]
            d = d[quoted or plain]
    return d


def shows(figure: str, value, scale=1) -> bool:
    "Whether `value` times `scale` prints as `figure` (at its digits, either tie direction; `k`, exponents)."
    text = printed(figure)
    if text.endswith('k'): text, scale = text[:-1], Decimal(str(scale)) / 1000
    try: x = Decimal(str(value)) * Decimal(str(scale))
    except ArithmeticError: return False
    if 'e' in text:
        mantissa = text.split('e')[0]
        return f"{float(x):.{len(mantissa.split('.')[1]) if '.' in mantissa else 0}e}" == text
    step = Decimal(1).scaleb(Decimal(text).as_tuple().exponent)
    return Decimal(text) in (x.quantize(step, ROUND_HALF_UP), x.quantize(step, ROUND_HALF_DOWN))


def mismatches() -> list[str]:
    "A message for every FIGURES row whose key does not hold the figure."
    bad = []
    for block, figure, source, *scale in FIGURES:
        try: value = value_at(source)
        except (OSError, KeyError, IndexError, TypeError, ValueError) as e:
            bad.append(f'{block}: {figure} -> outputs/{source}: cannot read it ({type(e).__name__}: {e})'); continue
        if not shows(figure, value, *scale):
            bad.append(f'{block}: README prints {figure}, outputs/{source} holds {value!r}'
                       + (f' (x{scale[0]})' if scale else ''))
    return bad


def test_headline_figures_match_their_keys():
    bad = mismatches()
    assert not bad, 'README figures that their named keys no longer hold:\n  ' + '\n  '.join(bad)


def test_headline_figures_are_printed_in_their_blocks():
    missing = [f'{block}: {figure}' for block, figure, *_ in FIGURES
               if printed(figure) not in readme_numbers(block_text(block))]
    assert not missing, ('FIGURES rows whose figure the README block no longer prints (update the row with the '
                         'README):\n  ' + '\n  '.join(missing))


def test_results_page_is_the_report_of_the_outputs(tmp_path):
    "outputs/README.md is exactly what kgqa_nb.eval.report writes from the committed outputs (`make report`)."
    from kgqa_nb.eval.report import write_report
    assert (OUTPUTS/'README.md').read_text() == write_report(OUTPUTS, tmp_path/'README.md'), \
        'outputs/README.md is not what `make report` writes from outputs/: run `make report`'


# ------------------------------------------------------------------ the coarse net for the other numbers
def source_files(block: str) -> list[Path]:
    files = []
    for rel in PATH.findall(block):
        p = ROOT/rel
        assert p.exists(), f'cited path {rel} does not exist'
        found = [p] if p.is_file() else sorted(f for f in p.rglob('*') if f.suffix in ('.md', '.json', '.csv'))
        files += [f for f in found if f.suffix not in ('.jsonl', '.ipynb') and f.stat().st_size <= MAX_BYTES]
    return files


def source_numbers(files: list[Path]) -> set[Decimal]:
    "Every number in the files, plain (`0.9447`, `3.17e-15`) or with thousands commas, and each times 100."
    nums = set()
    for f in files:
        text = f.read_text(encoding='utf-8', errors='replace')
        for n in SOURCE_NUMBER.findall(text) + [n.replace(',', '') for n in SOURCE_THOUSANDS.findall(text)]:
            nums |= {Decimal(n), Decimal(n)*100}
    return nums


def traced(number: str, sources: set[Decimal]) -> bool:
    "Some source number rounds to `number` at its last shown digit (`k`: to the thousand)."
    value = Decimal(number.removesuffix('k'))*(1000 if number.endswith('k') else 1)
    tol = Decimal(500) if number.endswith('k') else Decimal(5).scaleb(value.as_tuple().exponent - 1)
    return any(abs(x - value) <= tol for x in sources)


def untraced() -> dict[str, list[str]]:
    "Block title -> the numbers it states that FIGURES, QUOTED and its cited files do not account for."
    bad = {}
    for title, text in blocks():
        keyed = {printed(f) for block, f, *_ in FIGURES if title.startswith(block)}
        nums = [n for n in dict.fromkeys(readme_numbers(text)) if n not in QUOTED and n not in keyed]
        files = source_files(text)
        if nums and not files: bad[title] = ['(no outputs/ source cited)'] + nums
        elif nums:
            sources = source_numbers(files)
            if missing := [n for n in nums if not traced(n, sources)]: bad[title] = missing
    return bad


def test_every_other_readme_number_is_in_its_cited_output():
    bad = untraced()
    assert not bad, 'README numbers not found in the outputs/ files their block cites:\n' + '\n'.join(
        f'  {title}: {", ".join(nums)}' for title, nums in bad.items())


def test_quoted_numbers_still_occur():
    stated = {n for _, text in blocks() for n in readme_numbers(text)}
    assert not (dead := sorted(set(QUOTED) - stated)), f'QUOTED entries no longer in the README (remove them): {dead}'


# ------------------------------------------------------------------ the rules themselves
def test_number_rules(tmp_path):
    assert readme_numbers('Qwen2.5-Coder-1.5B, 34B, 3-hop, Hits@1, KB-Coder(6), `kopl-engine` 0.1.1, `MAIN_N=12`') == []
    assert readme_numbers('3,000 programs, 24.7x, 98 / 94 / 92%, (95% CI 91.5-96.7), 17k, 26-62%, p = 3.2e-15.') == [
        '3000', '24.7', '98', '94', '92', '91.5', '96.7', '17k', '26', '62', '3.2e-15']
    (tmp_path/'m.csv').write_text('mrr,n,p\n0.9447,"17,183",3.17e-15\n', encoding='utf-8')
    src = source_numbers([tmp_path/'m.csv'])
    assert all(traced(n, src) for n in ('0.945', '94.5', '94', '17183', '17k', '3.2e-15'))
    assert not any(traced(n, src) for n in ('0.95', '20k', '3.1e-15', '94.4'))


def test_key_paths_and_rounding(monkeypatch, tmp_path):
    monkeypatch.setattr(sys.modules[__name__], 'OUTPUTS', tmp_path)
    (tmp_path/'s.json').write_text(json.dumps({'rows': [dict(config='a', n=3, acc=66.667), dict(config='b', n=2)],
                                               'x.y': {'ci': [1.25, 9.5]}, 'frac': 0.9176}))
    (tmp_path/'t.csv').write_text('table,row,value\nc,Overall,0.117\nc,Count,0.05\n')
    (tmp_path/'m.log').write_text('make install: exit 0, 432 s\n')
    assert value_at('s.json: rows[config=a].acc') == 66.667 and value_at('s.json: "x.y".ci[1]') == 9.5
    assert value_at('t.csv: [table=c][row=Overall].value') == '0.117'
    assert value_at(r'm.log: re:^make install: exit 0, (\d+) s') == '432'
    for bad in ('s.json: rows.acc', 's.json: rows[config=z].n', 's.json: nothing', 't.csv: [table=c].value'):
        with pytest.raises(KeyError): value_at(bad)
    assert shows('66.7', 66.667) and shows('67', 66.667) and not shows('66.6', 66.667)
    assert shows('91.8%', 0.9176, 100) and shows('17k', 17183) and shows('3.2e-15', 3.17e-15)
    assert shows('1.2', 1.25) and shows('1.3', 1.25) and shows('8,605', 8605.34) and not shows('8,600', 8605.34)
    assert shows('1.000', 1.0) and shows('0.04', 0.0382) and not shows('0.4', 0.0382)
    monkeypatch.setattr(sys.modules[__name__], 'FIGURES', [('b', '66.6', 's.json: rows[config=a].acc'),
                                                            ('b', '1', 's.json: rows[config=q].n')])
    assert mismatches() == ["b: README prints 66.6, outputs/s.json: rows[config=a].acc holds 66.667",
                            'b: 1 -> outputs/s.json: rows[config=q].n: cannot read it (KeyError: '
                            "'no item with config=q (at [config=q])')"]
