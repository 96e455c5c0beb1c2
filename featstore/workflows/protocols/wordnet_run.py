"""`featstore protocol wordnet` and `tiers` as one call each: FACETS' class assignment end to
end (`featstore.workflows.protocols.wordnet` holds the pieces: WordNet, similarities, thresholds).

WordNet pipeline (`wordnet_assignment`): read the ID and candidate class lists, resolve both
to synsets (a user mapping first, then WordNet's lookup, then with `auto_map` the first noun
sense), score every candidate against the ID set (sim = mean of path, normalised
Leacock-Chodorow and Wu-Palmer similarity, max over ID classes), and assign it ID or OOD at
each threshold (`rule`: distance, ID when 1 - sim <= T; similarity, ID when sim >= T). With
`out`, write OUT/similarity.tsv (one row per candidate; the columns of `SIMILARITY_COLUMNS`,
floats with 6 decimals, written atomically) and per threshold the assignment files, image
lists and specs (`wordnet.write_assignment`).

Sampling (`facets_sampling.Sampling`, FACETS' counts; that module cites the paper): both
divide each class's images into val and test halves and balance ID and OOD test rows
(`balance = true` in the written specs); the WordNet datasets take `per_class` = 50 images
per ID-assigned candidate class in each half (Table IV), the tier datasets every image
(Table V). The result's "sampling" records what was written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from featstore.errors import UsageError
from featstore.store.fileio import atomic_write_output
from featstore.workflows.protocols import wordnet as wnp
from featstore.workflows.protocols.facets_sampling import Sampling

SIMILARITY_COLUMNS = ("class", "synset", "sim", "path", "lch_norm", "wup", "nearest_id_class",
                      "nearest_synset")


def similarity_tsv(scores: Sequence[wnp.CandidateScore]) -> str:
    """The text of similarity.tsv: a header of SIMILARITY_COLUMNS, then one tab-separated row
    per candidate in `scores` order."""
    rows = "".join(f"{s.name}\t{s.synset}\t{s.sim:.6f}\t{s.path:.6f}\t{s.lch_norm:.6f}\t"
                   f"{s.wup:.6f}\t{s.nearest}\t{s.nearest_synset}\n" for s in scores)
    return "\t".join(SIMILARITY_COLUMNS) + "\n" + rows


def _mapping_summary(mapping: wnp.ClassMapping) -> dict[str, Any]:
    return {"mapped": len(mapping.synsets), "unmapped": mapping.unmapped, "how": mapping.how,
            "ambiguous": mapping.ambiguous}


def wordnet_assignment(id_classes: str, candidates: str, *, mapping: Path | None = None,
                       auto_map: bool = False, thresholds: Sequence[float] | None = None,
                       rule: str = "distance", images: str | None = None,
                       images_root: Path | None = None, base_spec: Path | None = None,
                       out: Path | None = None, sampling: Sampling | None = None
                       ) -> dict[str, Any]:
    """The WordNet pipeline (module docstring); returns {"rule", "thresholds": {tag: T},
    "id_classes", "candidates" (each {"mapped", "unmapped", "how"}), "scores" (one dict per
    candidate, CandidateScore's fields), "assignments": {tag: {candidate: "id"|"ood"}},
    "files": {tag: what write_assignment wrote} (empty without `out`), "sampling"}.
    `sampling` defaults to the paper's (`Sampling()`: val/test halves, 50 per class, balanced)."""
    sampling = sampling or Sampling()
    thresholds = list(thresholds or wnp.DEFAULT_THRESHOLDS)
    for t in thresholds:
        wnp.assign_threshold([], t, rule)  # a bad rule or threshold before any work
    if base_spec is not None and images is None:
        raise UsageError("--base-spec needs --images (the candidate images to assign)")
    id_list, cand_list = wnp.read_class_list(id_classes), wnp.read_class_list(candidates)
    user_map = wnp.read_mapping(mapping) if mapping else None
    wn = wnp.load_wordnet()
    id_map = wnp.resolve_classes(id_list, user_map, auto_map, wn)
    cand_map = wnp.resolve_classes(cand_list, user_map, auto_map, wn)
    scores = wnp.score_candidates(cand_map, id_map)
    assignments = {wnp.threshold_tag(t): wnp.assign_threshold(scores, t, rule)
                   for t in thresholds}
    files: dict[str, Any] = {}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_output(out / "similarity.tsv", similarity_tsv(scores))
        imgs = wnp.candidate_images(images, cand_list, images_root) if images else None
        for tag, assignment in assignments.items():
            files[tag] = wnp.write_assignment(out, tag, assignment, imgs, base_spec, sampling)
    return {"rule": rule, "thresholds": {wnp.threshold_tag(t): t for t in thresholds},
            "id_classes": _mapping_summary(id_map), "candidates": _mapping_summary(cand_map),
            "scores": [dict(s.__dict__) for s in scores], "assignments": assignments,
            "files": files, "sampling": sampling.to_json()}


def tier_assignment(tiers_file: Path, *, images: str | None = None,
                    images_root: Path | None = None, base_spec: Path | None = None,
                    out: Path | None = None, skip_untiered: bool = False,
                    sampling: Sampling | None = None) -> dict[str, Any]:
    """FACETS' OODness tiers: {"tiers": {class: tier}, "assignments": {T1, T2: {class:
    "id"|"ood"}}, "files", "untiered": {class: images}, "sampling"}: T1 takes tiers 0-1 as
    ID, T2 tiers 0-2 (`wordnet.assign_tiers`); with `out`, the assignment files, image lists
    and specs of each. Candidate images of a class the tier file does not list are never
    dropped silently: a UsageError naming them, or with `skip_untiered` left out and counted
    in "untiered". `sampling` defaults to the paper's for the tier datasets (every image,
    balanced: `Sampling(per_class=None)`)."""
    sampling = sampling or Sampling(per_class=None)
    if base_spec is not None and images is None:
        raise UsageError("--base-spec needs --images (the candidate images to assign)")
    tier_map = wnp.read_tiers(tiers_file)
    assignments = {v: wnp.assign_tiers(tier_map, v) for v in wnp.TIERS}
    files: dict[str, Any] = {}
    imgs = wnp.candidate_images(images, list(tier_map), images_root) if images else None
    untiered = {c: len(v) for c, v in (imgs or {}).items() if c not in tier_map and v}
    if untiered and not skip_untiered:
        names = sorted(untiered)
        raise UsageError(f"--images {images!r}: {sum(untiered.values())} images of "
                         f"{len(names)} classes have no tier in {str(tiers_file)!r} (first: "
                         f"{', '.join(names[:3])}); add them to the tier file, or pass "
                         "--skip-untiered to leave them out")
    if out is not None:
        for tag, a in assignments.items():
            files[tag] = wnp.write_assignment(out, tag, a, imgs, base_spec, sampling)
    return {"tiers": tier_map, "assignments": assignments, "files": files,
            "untiered": untiered, "sampling": sampling.to_json()}


__all__ = ["SIMILARITY_COLUMNS", "similarity_tsv", "tier_assignment", "wordnet_assignment"]
