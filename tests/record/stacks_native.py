"""Native frames under Python ones: `in_c` spends its time in zlib's C code (deflate),
`in_python` in the interpreter, each call some 20 ms (a training step's parts, not
the adversarial few-ms alternation); a thread of the program's own runs C too."""
import os
import threading
import zlib

ROUNDS = int(os.environ.get("STACKS_NATIVE_ROUNDS", "10"))
DATA = (bytes(range(256)) * 4096 + os.urandom(1 << 18)) * 4


def in_c():
    return len(zlib.compress(DATA, 9))


def in_python():
    x = 0
    for i in range(800_000):
        x += i * i
    return x


def helper():
    for _ in range(ROUNDS * 10):
        zlib.crc32(DATA)


def main():
    t = threading.Thread(target=helper, name="helper")
    t.start()
    for _ in range(ROUNDS):
        in_c()
        in_python()
    t.join()


if __name__ == "__main__":
    main()
