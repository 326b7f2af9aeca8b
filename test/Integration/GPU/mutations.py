"""Runs IR mutations against the emulation cases that must catch them (the
*_emulation.py scripts' --mutations)."""


def run_mutations(mutations, text_of, problems_of, only=None, width=62):
    """`mutations`: (label, case name, mutate(lines) in place); `text_of(name)`
    the case's lowered IR; `problems_of(name, text)` what the case finds wrong
    with `text`. Prints each verdict; returns how many went unnoticed."""
    missed = 0
    for label, name, mutate in mutations:
        if only and name not in only:
            continue
        lines = text_of(name).splitlines()
        mutate(lines)
        problems = problems_of(name, "\n".join(lines))
        missed += not problems
        verdict = f"caught: {problems[0][:200]}" if problems else "MISSED"
        print(f"{label:{width}s} [{name}] {verdict}")
    print(f"{missed} of {len(mutations)} mutations missed")
    return missed
