"""`softeval testbed`: a synthetic world with known answers (docs/research/testbed.md, "The ranking claim on a world
with known answers"). `world` draws it, `corpus` writes its texts and tokenizer, `recipes` lists the
pre-training recipes, `train` and `build` make the base models and their post-trained partners, `sweepfile`
writes the comparison as a sweep file, `stats` and `summary` turn the finished runs into `testbed.json`,
`driver` runs the phases in order."""
