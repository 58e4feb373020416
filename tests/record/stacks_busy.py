"""A busy single thread for the stack readers' tests: `<module>` calls `heavy` and
`light` in turn forever, holding the GIL; prints `ready` first."""


def heavy(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def light(n):
    total = 0
    for i in range(n):
        total += i
    return total


print("ready", flush=True)
while True:
    heavy(70000)
    light(30000)
