t = int(input())
for _ in range(t):
    word = input().strip().lower()
    print("YES" if word == word[::-1] else "NO")
